"""The stub engines read the Hugging Face token as huggingface_hub does (utils/_auth.py
get_token, constants.py HF_TOKEN_PATH / HF_HOME), and a gated lane without one fails as
the engine does (issue 46 item 8: the token now reaches the ranks as a file)."""

from __future__ import annotations

import pytest
from test_stub_group import gpu, groups  # noqa: F401 (the stub group fixtures)

from sparkrack.rehearsal.stub.hubtoken import gated_error, hub_token, token_path

REPO_ID = "zai-org/GLM-5.3"


def test_the_environment_first_then_the_file_hf_token_path_names(tmp_path):
    token = tmp_path / "token"
    token.write_text(" hf_fromthefile\r\n")
    assert hub_token({"HF_TOKEN": "hf_env", "HF_TOKEN_PATH": str(token)}) == "hf_env"
    assert hub_token({"HUGGING_FACE_HUB_TOKEN": "hf_old", "HF_TOKEN_PATH": str(token)}) == "hf_old"
    assert hub_token({"HF_TOKEN": "", "HF_TOKEN_PATH": str(token)}) == "hf_fromthefile"
    assert hub_token({"HF_TOKEN": " \n", "HF_TOKEN_PATH": str(token)}) == "hf_fromthefile"


def test_without_hf_token_path_the_file_is_hf_home_token(tmp_path):
    assert token_path({"HF_HOME": str(tmp_path / "hf")}) == str(tmp_path / "hf" / "token")
    assert token_path({"XDG_CACHE_HOME": str(tmp_path)}) == str(tmp_path / "huggingface" /
                                                                 "token")
    (tmp_path / "token").write_text("hf_home")
    assert hub_token({"HF_HOME": str(tmp_path)}) == "hf_home"


def test_a_missing_file_is_no_token_and_an_unreadable_one_raises(tmp_path):
    assert hub_token({"HF_TOKEN_PATH": str(tmp_path / "absent")}) is None
    (tmp_path / "empty").write_text("\n")
    assert hub_token({"HF_TOKEN_PATH": str(tmp_path / "empty")}) is None
    with pytest.raises(IsADirectoryError):  # any OSError but a missing file: raised, as there
        hub_token({"HF_TOKEN_PATH": str(tmp_path)})


@pytest.fixture
def gated(tmp_path, groups):  # noqa: F811 - the fixture, by its name
    """A one-rank SGLang stub lane that fetches from a gated repo; no token from this
    machine (its own HF_TOKEN or ~/.cache/huggingface/token never reach the rank)."""
    def make(**env):
        return groups(nnodes=1, config={"gated_repo": REPO_ID},
                      env={"HF_TOKEN": "", "HUGGING_FACE_HUB_TOKEN": "",
                           "HF_HOME": str(tmp_path / "home"), **env})
    return make


def test_a_gated_lane_reads_the_token_file_and_fails_without_it(gated, tmp_path):
    absent = gated(HF_TOKEN_PATH=str(tmp_path / "absent"))
    absent.start(0)
    assert absent.procs[0].wait(10) == 1
    assert gated_error(REPO_ID).splitlines()[0] in absent.log(0)
    assert "Cannot access gated repo for url https://huggingface.co/zai-org/GLM-5.3" in \
        absent.log(0)
    unreadable = gated(HF_TOKEN_PATH=str(tmp_path))
    unreadable.start(0)
    assert unreadable.procs[0].wait(10) == 1
    assert f"IsADirectoryError: [Errno 21] Is a directory: '{tmp_path}'" in unreadable.log(0)
    token = tmp_path / "token"
    token.write_text("hf_thetoken")
    token.chmod(0o600)
    served = gated(HF_TOKEN_PATH=str(token))
    served.start(0)
    served.wait_healthy()
    assert f"Hugging Face token for {REPO_ID} read from {token}" in served.log(0)


def test_gated_repo_is_a_repo_id_or_null():
    from sparkrack.rehearsal.stub.config import StubConfigError, check

    assert check({"gated_repo": REPO_ID}) == {"gated_repo": REPO_ID}
    with pytest.raises(StubConfigError, match="gated_repo must be a repo id "
                       r"\(org/name\) or null, got 3"):
        check({"gated_repo": 3})
