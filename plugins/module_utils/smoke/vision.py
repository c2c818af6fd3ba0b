# -*- coding: utf-8 -*-
"""The vision group's check: does the OCR answer contain the receipt's known text. No I/O."""
from __future__ import annotations

import re

PROMPT = ("Transcribe all text in this receipt image exactly, line by line, including every number. "
          "Output only the transcription.")


def normalise_text(text):
    """Upper-case and drop everything except letters, digits and '.' (so '4471 - K3' matches '4471-K3')."""
    return re.sub(r"[^0-9A-Z.]", "", (text or "").upper())


def ocr_check(answer, required_tokens):
    """``{"ok", "missing", "found"}``: which required tokens occur in the normalised answer."""
    norm = normalise_text(answer)
    missing = [t for t in required_tokens if normalise_text(t) not in norm]
    return {"ok": not missing and bool(required_tokens), "missing": missing,
            "found": [t for t in required_tokens if t not in missing]}
