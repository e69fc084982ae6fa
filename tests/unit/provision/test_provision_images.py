"""Images: which ID is right (pure) and the tar reader (the chain that moves them:
test_transfer.py)."""

import pytest
from provision_helpers import write_image_tar

from sparkrack.facts.provision import ProvisionFacts
from sparkrack.provision.images import resolve_images, tar_image

ORDER = ["spark-01", "spark-02", "spark-03"]


def facts(**images) -> dict:
    return {name: ProvisionFacts(images=value) for name, value in images.items()}


def test_tar_source_wins(tmp_path):
    tar = tmp_path / "s.tar"
    image_id = write_image_tar(tar, "t/s:1", 4096)
    targets = resolve_images({"t/s:1": str(tar)}, facts(spark_01={}), ORDER, "spark-01")
    assert targets["t/s:1"].image_id == image_id
    assert targets["t/s:1"].source == f"tar:{tar}"


def test_head_wins_over_the_others():
    found = facts(**{"spark-01": {"t/s:1": "sha256:aa"}, "spark-02": {"t/s:1": "sha256:bb"},
                     "spark-03": {"t/s:1": "sha256:bb"}})
    target = resolve_images({"t/s:1": ""}, found, ORDER, "spark-01")["t/s:1"]
    assert (target.image_id, target.source) == ("sha256:aa", "node:spark-01")


def test_without_the_head_the_holders_must_agree():
    agree = facts(**{"spark-01": {}, "spark-02": {"t/s:1": "sha256:bb"},
                     "spark-03": {"t/s:1": "sha256:bb"}})
    target = resolve_images({"t/s:1": ""}, agree, ORDER, "spark-01")["t/s:1"]
    assert (target.image_id, target.source) == ("sha256:bb", "node:spark-02")
    disagree = facts(**{"spark-01": {}, "spark-02": {"t/s:1": "sha256:bb"},
                        "spark-03": {"t/s:1": "sha256:cc"}})
    error = resolve_images({"t/s:1": ""}, disagree, ORDER, "spark-01")["t/s:1"].error
    assert error.startswith("nodes disagree on t/s:1 (spark-02=bb, spark-03=cc)")
    nobody = resolve_images({"t/s:1": ""}, facts(**{"spark-01": {}}), ORDER, "spark-01")
    assert nobody["t/s:1"].error.startswith("no node has t/s:1 and no source tar is set")


def test_tar_problems_are_explained(tmp_path):
    tar = tmp_path / "s.tar"
    write_image_tar(tar, "t/other:1", 1024)
    with pytest.raises(ValueError, match="holds t/other:1, not t/s:1"):
        tar_image(tar, "t/s:1")
    with pytest.raises(ValueError, match="No such file"):
        tar_image(tmp_path / "none.tar", "t/s:1")
    (tmp_path / "junk.tar").write_bytes(b"not a tar")
    with pytest.raises(ValueError, match="not a docker-save archive"):
        tar_image(tmp_path / "junk.tar", "t/s:1")
    missing = resolve_images({"t/s:1": str(tmp_path / "none.tar")}, {}, ORDER, "spark-01")
    assert "No such file" in missing["t/s:1"].error
