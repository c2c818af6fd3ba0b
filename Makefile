# Entry points. The README's two commands are scripts/demo.sh and scripts/test.sh (`make demo`, `make test`).
SHELL := /bin/bash
.PHONY: setup demo test unit sim-up sim-down

setup:
	scripts/setup.sh

demo:
	scripts/demo.sh

test:
	scripts/test.sh

unit: setup
	.venv/bin/python -m pytest -q tests/unit

sim-up: setup
	sim/simctl up

sim-down:
	sim/simctl down
