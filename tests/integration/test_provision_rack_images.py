"""engine_images on the rehearsal rack, with test images of its own (refs sparkrack-test/*)
so the stub engine images of the real refs are never touched. Test images are removed
from every node before and after."""

import pytest
from provision_helpers import failures, inventory_copy, write_image_tar

from sparkrack.fleet import Fleet, sh
from sparkrack.provision import provision
from sparkrack.provision.report import as_json
from sparkrack.transfer.images import file_chunks

pytestmark = pytest.mark.rack

REFS = {"sglang": "sparkrack-test/sglang:provision", "vllm": "sparkrack-test/vllm:provision"}


def remove_test_images(inventory, *ids):
    with Fleet(inventory) as fleet:
        results = fleet.run(sh('docker image rm -f "$@" >/dev/null 2>&1; exit 0', "sh",
                               *REFS.values(), *ids))
    assert results.all_ok, results.summary()


def image_ids(inventory, ref):
    with Fleet(inventory) as fleet:
        results = fleet.run(sh('docker image inspect --format "{{.Id}}" "$1" 2>/dev/null; exit 0',
                               ref))
    return {r.node: r.stdout.strip() or None for r in results}


@pytest.fixture(scope="module")
def images(inventory, tmp_path_factory):
    """A test inventory whose sglang image comes from a tar here, vllm from the head."""
    folder = tmp_path_factory.mktemp("images")
    ids = {"sglang": write_image_tar(folder / "sglang.tar", REFS["sglang"], 6 << 20, seed=1),
           "vllm": write_image_tar(folder / "vllm.tar", REFS["vllm"], 3 << 20, seed=2)}
    wrong = write_image_tar(folder / "wrong.tar", REFS["sglang"], 1 << 20, seed=3)
    test_inventory = inventory_copy(inventory.path, folder / "inv", images=REFS,
                                    rehearsal_image_sources={
                                        "sglang": str(folder / "sglang.tar")})
    remove_test_images(inventory, wrong)
    yield test_inventory, ids, folder, wrong
    remove_test_images(inventory, wrong, *ids.values())


def load_on(inventory, node, tar):
    with Fleet(inventory, inventory.select(node)) as fleet:
        result = fleet.stream(node, ["docker", "load"], file_chunks(tar), timeout=120)
    assert result.ok, result.error


def test_same_id_everywhere_and_a_second_run_moves_no_bytes(inventory, images):
    test_inventory, ids, folder, _ = images
    load_on(inventory, "spark-01", folder / "vllm.tar")  # the head holds the vllm image
    seen: dict[str, list[tuple[int, int]]] = {}
    first = provision(test_inventory, roles="engine_images", on_progress=lambda label, done,
                      total: seen.setdefault(label, []).append((done, total)))
    assert first.exit_code == 0, as_json(first)
    nodes = [n.name for n in inventory.nodes]  # each node's copy shown as it goes, then whole
    assert set(seen) == {f"{n} {ref.rpartition('/')[2]}" for n in nodes for ref in REFS.values()
                         if not (n == "spark-01" and "vllm" in ref)}, sorted(seen)
    size = (folder / "sglang.tar").stat().st_size
    assert all(seen[f"{n} sglang:provision"][-1] == (size, size) for n in nodes), seen
    assert {t.ref: t.source for t in first.transfers} == {
        REFS["sglang"]: f"tar:{folder / 'sglang.tar'}", REFS["vllm"]: "node:spark-01"}
    sglang = next(t for t in first.transfers if t.ref == REFS["sglang"])
    assert len(sglang.targets) == 8 and sglang.chains == 1
    assert sglang.bytes_sent == (folder / "sglang.tar").stat().st_size  # sent once
    for engine, ref in REFS.items():
        assert set(image_ids(inventory, ref).values()) == {ids[engine]}
    second = provision(test_inventory, roles="engine_images")
    assert second.exit_code == 0 and second.changed == 0
    assert second.transfers == [] and second.bytes_moved == 0


def test_a_node_with_another_image_under_the_ref_gets_the_right_one(inventory, images):
    test_inventory, ids, folder, wrong = images
    load_on(inventory, "spark-01", folder / "vllm.tar")
    assert provision(test_inventory, roles="engine_images").exit_code == 0
    load_on(inventory, "spark-04", folder / "wrong.tar")
    assert image_ids(inventory, REFS["sglang"])["spark-04"] == wrong
    # only spark-04 selected: the vllm source (the head) is asked for its image all the same
    report = provision(test_inventory, "spark-04", roles="engine_images", check=True)
    [change] = [c for c in report.node("spark-04").plan if c.changed]
    assert change.summary.startswith(f"{REFS['sglang']}: has {wrong[7:19]}, load")
    report = provision(test_inventory, "spark-04", roles="engine_images")
    assert report.exit_code == 0 and report.recap("spark-04")["changed"] == 1
    assert set(image_ids(inventory, REFS["sglang"]).values()) == {ids["sglang"]}


def test_no_source_anywhere_fails_clearly(inventory, images):
    test_inventory = images[0]
    remove_test_images(inventory)
    report = provision(test_inventory, "spark-02", roles="engine_images", check=True)
    assert report.exit_code == 1, failures(report)
    failed = [c for c in report.node("spark-02").plan if c.status == "failed"]
    assert failed[0].summary.startswith(
        f"{REFS['vllm']}: no node has {REFS['vllm']} and no source tar is set")
