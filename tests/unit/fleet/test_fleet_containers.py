"""The fleet's door to a node's dockerd (fleet/containers.py), over a fake docker SDK client."""

import docker.errors
import pytest

from sparkrack.fleet.containers import (
    Container,
    ContainerNotFound,
    NodeDocker,
    OutputTooLong,
    view,
)


class SdkContainer:
    """What docker-py's Container offers that the door uses."""

    def __init__(self, cid, name, status, *, labels=None, code=0, health=None):
        self.id, self.name, self.status, self.labels = cid, name, status, labels or {}
        state = {"ExitCode": code, **({"Health": {"Status": health}} if health else {})}
        self.attrs = {"State": state, "Created": "2026-12-03T10:00:00Z", "Image": "sha256:abc",
                      "Config": {"Image": "lmsysorg/sglang:v1", "Entrypoint": ["python3"],
                                 "Cmd": ["-m", "sglang.launch_server", "--port", "30000"]}}
        self.calls = []

    def start(self):
        self.calls.append("start")

    def stop(self, timeout):
        self.calls.append(("stop", timeout))

    def remove(self, force):
        self.calls.append(("remove", force))

    def logs(self, **options):
        self.calls.append(("logs", options))
        return b"line\n"


class SdkImages:
    def __init__(self, ids):
        self.ids = ids

    def get(self, ref):
        if ref not in self.ids:
            raise docker.errors.ImageNotFound(ref)
        return type("Image", (), {"id": self.ids[ref],
                                  "labels": {"org.opencontainers.image.version": "0.5.22"}})()


class SdkClient:
    def __init__(self, *found, images=None):
        self.found = list(found)
        self.listed, self.created = [], []
        self.containers = self
        self.images = SdkImages(images or {})

    def list(self, all, filters):
        assert all
        self.listed.append(filters)
        return self.found

    def get(self, name):
        for c in self.found:
            if name in (c.id, c.name):
                return c
        raise docker.errors.NotFound(name)

    def create(self, **kwargs):
        self.created.append(kwargs)


def test_a_container_is_a_plain_view():
    running = view(SdkContainer("c1", "rank0", "running", labels={"a": "1"}, health="healthy"))
    assert running == Container(
        id="c1", name="rank0", status="running", labels={"a": "1"}, exit_code=None,
        health="healthy", created="2026-12-03T10:00:00Z", image="lmsysorg/sglang:v1",
        image_id="sha256:abc", argv=("python3", "-m", "sglang.launch_server", "--port", "30000"))
    assert running.alive
    exited = view(SdkContainer("c2", "rank1", "exited", code=137))
    assert (exited.exit_code, exited.alive, exited.health) == (137, False, None)


def test_found_by_labels_or_by_exact_name():
    client = SdkClient(SdkContainer("c1", "rank0", "running"))
    node = NodeDocker(client, "spark-01")
    assert [c.name for c in node.containers(labels=["sparkrack.engine", "sparkrack.rank=0"])] \
        == ["rank0"]
    node.containers(name="rank0")
    assert client.listed == [{"label": ["sparkrack.engine", "sparkrack.rank=0"]},
                             {"name": "^/rank0$"}]


def test_what_sparkrack_does_to_a_container():
    alive, stopped = SdkContainer("c1", "rank0", "running"), SdkContainer("c2", "rank1", "exited")
    client = SdkClient(alive, stopped)
    node = NodeDocker(client, "spark-01")
    node.create(name="rank2", image="x")
    node.start("rank0")
    node.stop("rank0", timeout=7)
    node.stop("rank1", timeout=7)  # not running: left as it is
    node.remove("rank1")
    assert node.logs("rank0", tail=5) == b"line\n"
    assert client.created == [{"name": "rank2", "image": "x"}]
    assert alive.calls == ["start", ("stop", 7), ("logs", {"tail": 5})]
    assert stopped.calls == [("remove", True)]


def test_a_missing_container_or_image_is_said_without_the_sdk():
    node = NodeDocker(SdkClient(), "spark-03")
    with pytest.raises(ContainerNotFound, match="no container rank5 on spark-03"):
        node.container("rank5")
    with pytest.raises(ContainerNotFound):
        node.stop("rank5", timeout=1)
    assert node.image_info("lmsysorg/sglang:v1") is None
    has = NodeDocker(SdkClient(images={"lmsysorg/sglang:v1": "sha256:fb90"}), "spark-01")
    assert has.image_info("lmsysorg/sglang:v1") == (
        "sha256:fb90", {"org.opencontainers.image.version": "0.5.22"})


def test_a_container_run_to_its_end_is_created_within_its_limits():
    class Once(SdkContainer):
        def put_archive(self, path, data):
            self.calls.append(("put", path))

        def wait(self, timeout):
            return {"StatusCode": 0}

    once = Once("c9", "learn", "created")

    class Client(SdkClient):
        def create(self, image, **kwargs):
            self.created.append({"image": image, **kwargs})
            return once

    client = Client()
    code, out, err = NodeDocker(client, "spark-01").run_to_end(
        "x:1", ["python3", "-V"], name="learn", files={"/tmp/a": b"1"}, timeout=5,
        labels={"l": "1"}, limits={"mem_limit": "2g", "pids_limit": 64}, output_limit=100)
    assert (code, out) == (0, b"line\n")
    assert client.created == [{"image": "x:1", "entrypoint": ["python3"], "command": ["-V"],
                               "name": "learn", "network_disabled": True, "labels": {"l": "1"},
                               "detach": True, "mem_limit": "2g", "pids_limit": 64}]
    assert once.calls[-1] == ("remove", True)


def test_a_program_run_to_its_end_is_read_only_to_its_output_limit():
    """Issue 53 item 3: the learn container's whole output was read into memory."""
    read = []

    class Stream:
        def __init__(self, chunks):
            self.chunks, self.closed = chunks, False

        def __iter__(self):
            for chunk in self.chunks:
                read.append(len(chunk))
                yield chunk

        def close(self):
            self.closed = True

    streams = []

    class Loud(SdkContainer):
        def put_archive(self, path, data):
            pass

        def wait(self, timeout):
            return {"StatusCode": 0}

        def logs(self, **options):
            assert options.get("stream") is True, options  # never the whole log at once
            streams.append(Stream([b"x" * 400] * 1000 if options["stdout"] else [b"note\n"]))
            return streams[-1]

    loud = Loud("c9", "learn", "created")

    class Client(SdkClient):
        def create(self, image, **kwargs):
            return loud

    with pytest.raises(OutputTooLong) as cut:
        NodeDocker(Client(), "spark-01").run_to_end(
            "x:1", ["python3", "-c", "..."], name="learn", files={}, timeout=5, labels={},
            limits={}, output_limit=1000)
    assert str(cut.value) == ("python3 in x:1 on spark-01 printed over 1,000 bytes on stdout "
                              "(read no further)")
    assert sum(read) == 1200 and streams[0].closed  # three chunks, then closed
    assert loud.calls[-1] == ("remove", True)
