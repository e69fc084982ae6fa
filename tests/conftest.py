"""Test-suite guards and the rehearsal racks a test run boots.

SPARKRACK_SANDBOX=1 is set before any sparkrack module runs: under it the fleet layer
refuses every address outside loopback and the rehearsal subnet. SPARKRACK_STATE_DIR points
the local rack lock and audit copy at a fresh temporary folder. The rehearsal PDU's SNMPv3
user and keys are in the environment, as its operator exports them.

Every rack test runs on a private rehearsal rack of its process's own (tests/rackns.py),
never on this machine's rack nor another run's: a process that collected a rack test takes
a test rack slot (waiting, and saying so, while other runs hold every slot) and boots its
rack there. Under pytest-xdist (`-n 3`, pyproject's addopts), as root, the first two
processes are rack processes, each with a rack of its own, and the rack modules are shared
out between them; the third runs unit modules only. SPARKRACK_TEST_RACKS=1 runs every rack
test in the first process on one rack, the unit modules beside them.
docs/internals.md#the-test-suite
"""

import json
import os
import shutil
import signal
import sys
import tempfile

os.environ["SPARKRACK_SANDBOX"] = "1"
os.environ.pop("SPARKRACK_INVENTORY", None)
# local lock and audit copy of the tasks a test runs: never the developer's own
os.environ["SPARKRACK_STATE_DIR"] = tempfile.mkdtemp(prefix="sparkrack-test-state-")

from pathlib import Path  # noqa: E402

from sparkrack.rehearsal.pdu import REHEARSAL_CREDENTIALS  # noqa: E402

for _name, _value in REHEARSAL_CREDENTIALS.items():  # the rehearsal PDU's, as exported
    os.environ.setdefault(_name, _value)

import pytest  # noqa: E402
import rackhealth  # noqa: E402
import rackns  # noqa: E402
import rackorder  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
REHEARSAL_INVENTORY = REPO / "inventory" / "rehearsal"

if rackns.inside():
    rackns.keep_outside(os.getppid())  # the run's controller, in the machine's namespaces
    rackns.loopback_up()  # a rack process's new network namespace: the unit tests need lo


_SESSION: dict = {}  # the slot and rack once taken and booted; "dirty" after a failure


@pytest.fixture(autouse=True)
def ctrl_c_as_a_terminal_sends_it():
    """Every test starts with Ctrl-C's default handling (KeyboardInterrupt here, and not
    ignored in the commands it starts: an ignored SIGINT is inherited through exec). A
    library or test that changed it earlier in this process must not decide how a later
    test's commands take Ctrl-C (under xdist a process runs many modules)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield


@pytest.fixture
def gate_burn(monkeypatch):
    """The one seam of the gates' burn (sparkrack/safety/gateburn.py): gate_burn(fn) has
    every gate of this test (up, roll, a restore, a reboot's batches, a power cycle) run
    fn(inventory, nodes, fleet=None) instead of safety's burn; returns fn. The rack tests
    have it set to a shorter burn (tests/integration/conftest.py)."""
    from sparkrack.safety import gateburn

    def use(fn):
        monkeypatch.setattr(gateburn, "gate_burn", fn)
        return fn

    return use


@pytest.fixture(scope="session")
def rack():
    """This process's private rehearsal rack (its slot's), booted once per test run, put back
    to healthy (what a killed run left in the slot: faults, engines, a lock) and
    provisioned; taken down at the end."""
    from sparkrack.inventory import load_inventory
    from sparkrack.rehearsal.rack import RehearsalRack

    if os.geteuid() != 0:
        pytest.skip("the rehearsal rack needs root")
    if "slot" not in _SESSION:
        pytest.skip("no private test rack here: it needs root, `unshare` and the cgroup "
                    "hierarchies the rehearsal rack uses (tests/rackns.py)")
    rack = RehearsalRack(load_inventory(REHEARSAL_INVENTORY), say=lambda msg: None)
    rack.up()
    rackhealth.repair_faults(rack)
    rackhealth.repair_engines(rack.inventory)
    rackhealth.provisioned(rack.inventory)  # a fresh rack (the second process's) too
    for node in rack.nodes:  # as the stub engines load in 1 s, not minutes
        rack.load_startup(node.name, rackhealth.LOAD_STARTUP_S)
    _SESSION["rack"] = rack
    yield rack
    _SESSION.pop("rack")
    rack.down()


_RACKS: dict = {}  # in the controlling process: the rack processes' names, the wrapper's folder


def pytest_configure(config):
    """Under xdist, as root: the first two processes (one with SPARKRACK_TEST_RACKS=1) are
    rack processes, started in namespaces of their own (tests/rackns.py)."""
    tx = getattr(config.option, "tx", None)
    if hasattr(config, "workerinput") or not tx or not rackns.available():
        return
    racks = 1 if os.environ.get("SPARKRACK_TEST_RACKS", "2") == "1" else 2
    wrapped = [index for index in range(min(racks, len(tx))) if tx[index] == "popen"]
    if not wrapped:
        return
    folder = Path(tempfile.mkdtemp(prefix="sparkrack-test-wrapper-"))
    for index in wrapped:
        tx[index] = f"popen//python={rackns.wrapper(folder)}"
    _RACKS.update(folder=folder, processes=tuple(f"gw{index}" for index in wrapped))


def pytest_unconfigure(config):
    if "folder" in _RACKS:
        shutil.rmtree(_RACKS.pop("folder"), ignore_errors=True)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """A rack process that collected a rack test (after -k and deselection): its own
    namespaces (a single-process run unshares here), a test rack slot, its private view.
    Not timed by pytest-timeout: a wait for a slot held by another run is no test's."""
    if session.config.option.collectonly or not any(_uses_rack(i) for i in session.items):
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is not None and not rackns.inside():
        return  # a unit process, or no private racks on this machine
    if worker is None:
        if not rackns.available():
            return
        rackns.unshare_here()
    _SESSION["slot"] = slot = rackns.take_slot(lambda text: _say(session.config, text))
    rackns.enter(slot, REHEARSAL_INVENTORY)


def _uses_rack(item) -> bool:
    """Whether item needs this file's `rack` (not a fixture of the same name elsewhere)."""
    info = getattr(item, "_fixtureinfo", None)
    definitions = info.name2fixturedefs.get("rack", ()) if info else ()
    return bool(definitions) and definitions[-1].func.__module__ == __name__  # the closest


def _say(config, text: str) -> None:
    """One line on the terminal, from a worker too (its stderr is the run's)."""
    capture = config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        sys.stderr.write(f"\n[{os.environ.get('PYTEST_XDIST_WORKER', 'pytest')}] {text}\n")
        sys.stderr.flush()


def _rack_processes(config) -> tuple[str, ...]:
    """The xdist processes that take rack modules (without private racks, the first two:
    their rack tests skip, saying why)."""
    return _RACKS.get("processes", ("gw0", "gw1"))


_is_rack_scope = rackorder.is_rack_module


def pytest_collection_modifyitems(config, items):
    """The rack modules first, the costliest first (tests/rackorder.py), each module's tests
    together and in their order; the unit modules after them, as collected. Every process
    orders its collection the same way, so xdist's processes agree."""
    items[:] = rackorder.ordered(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist: each module kept in one process (its module fixtures made once),
    the modules handed out in collection order as the processes free up. The first two
    processes take the rack modules (long, CPU-bound on the rack) first, then unit modules;
    a third (`-n 3`, pyproject's addopts) takes unit modules only, from the start, so that
    their waits (lock timeouts, heartbeats, a stopped sshd) overlap the racks' work. With
    one rack, every rack test (tests/integration) in one process, one after another, on the
    rack booted once."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # xdist's order (most tests first) ends in a rack module

    class RackTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            together = _is_rack_scope(path) and len(_rack_processes(config)) < 2
            return "tests/integration" if together else path

        def _next_scope(self, node) -> str | None:
            """The first module in the queue this process may run."""
            rack_process = node.gateway.id in _rack_processes(config)
            return next((scope for scope in self.workqueue
                         if rack_process or not _is_rack_scope(scope)), None)

        def _assign_work_unit(self, node) -> None:
            scope = self._next_scope(node)
            if scope is None:
                return
            work_unit = self.workqueue.pop(scope)
            self.assigned_work.setdefault(node, {})[scope] = work_unit
            collection = self.registered_collections[node]
            node.send_runtest_some([collection.index(nodeid)
                                    for nodeid, done in work_unit.items() if not done])

        def _reschedule(self, node) -> None:
            if node.shutting_down:
                return
            if self._next_scope(node) is None:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) > 2:
                return
            self._assign_work_unit(node)

    return RackTogether(config, log)


def pytest_runtest_setup(item):
    """Before a rack test (and before its module's fixtures): the rack's faults undone, and
    after a rack test that failed, its engines and lock too. One failure never cascades."""
    rack = _SESSION.get("rack")
    if rack is None or "rack" not in item.fixturenames:
        return
    rackhealth.repair_faults(rack)
    if _SESSION.pop("dirty", False):
        rackhealth.repair_engines(rack.inventory)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With SPARKRACK_TEST_COSTS=FILE: each rack test's CPU-seconds (its racks' and its
    process's) appended to FILE, for tests/rackorder.py's table."""
    out, slot = os.environ.get("SPARKRACK_TEST_COSTS"), _SESSION.get("slot")
    if not out or slot is None or not _uses_rack(item):
        return (yield)
    cgroups = slot.cgroups
    before = rackorder.slot_cpu_seconds(cgroups)
    result = yield
    with open(out, "a") as costs:
        costs.write(json.dumps({"nodeid": item.nodeid, "cpu_s": round(
            rackorder.slot_cpu_seconds(cgroups) - before, 2)}) + "\n")
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed and "rack" in item.fixturenames:
        _SESSION["dirty"] = True
    return report


@pytest.fixture(scope="session")
def inventory(rack):
    """The rehearsal inventory (with the rack up)."""
    return rack.inventory


@pytest.fixture
def engine_rack(rack, inventory):
    """The rack made ready for engines, before each test that asks
    (rackhealth.ready_for_engines: provisioned, the stub model directory with a short load
    delay, every GPU's clock lock as the cap unit sets it)."""
    rackhealth.ready_for_engines(rack, rackhealth.STUB_CONFIG)
    return inventory


