"""The stand-in finds the Hugging Face token the way huggingface_hub does (HF_TOKEN, else HF_TOKEN_PATH's file)."""

from vllm_standin import config


def test_env_wins_then_the_file_then_nothing(tmp_path):
    f = tmp_path / "token"
    f.write_text("hf_file\n")
    assert config.hf_token({"HF_TOKEN": "hf_env", "HF_TOKEN_PATH": str(f)}) == ("hf_env", "HF_TOKEN")
    assert config.hf_token({"HF_TOKEN_PATH": str(f)}) == ("hf_file", "HF_TOKEN_PATH %s" % f)
    assert config.hf_token({"HF_TOKEN_PATH": str(tmp_path / "missing")}) == (None, None)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "token").write_text("hf_home")
    assert config.hf_token({"HF_HOME": str(tmp_path / "home")})[0] == "hf_home"
    f.write_text("  \n")
    assert config.hf_token({"HF_TOKEN_PATH": str(f)}) == (None, None)
