"""Which model directories the lanes use (lifecycle/modeluse.py), without a rack."""

from pathlib import Path

from sparkrack.deployments.record import Deployment
from sparkrack.inventory import load_inventory
from sparkrack.lifecycle.modeluse import runs_from, used_by

REHEARSAL = Path(__file__).resolve().parents[3] / "inventory" / "rehearsal"


def deployment(**kw) -> Deployment:
    return Deployment(**{"engine": "sglang", "profile": "512k", "deployment_id": "d",
                         "spec_hash": "s", "image": "i", "image_id": "sha256:x", **kw})


def test_every_shipped_profile_runs_from_the_inventorys_model_path():
    used = used_by(load_inventory(REHEARSAL))
    assert list(used) == ["/models/GLM-5.3-NVFP4"]
    assert {"sglang 512k", "vllm 512k"} <= set(used["/models/GLM-5.3-NVFP4"])


def test_a_record_names_its_own_model_path_an_older_one_its_profiles():
    inventory = load_inventory(REHEARSAL)
    assert runs_from(inventory, deployment(model_path="/models/other/")) == "/models/other"
    assert runs_from(inventory, deployment()) == "/models/GLM-5.3-NVFP4"
    assert runs_from(inventory, deployment(profile="gone")) == "/models/GLM-5.3-NVFP4"
