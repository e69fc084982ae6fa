"""The rack modules' costs (tests/rackorder.py) name every rack module and only those, and
order the collection costliest first."""

from types import SimpleNamespace

import rackorder


def test_every_rack_module_has_a_cost_and_every_cost_a_module():
    modules = {path.name for path in rackorder.INTEGRATION.glob("test_*.py")}
    assert set(rackorder.RACK_MODULE_COST) == modules


def test_the_costliest_rack_module_comes_first_and_a_modules_tests_stay_in_order():
    def item(nodeid):
        return SimpleNamespace(nodeid=nodeid)

    items = [item("tests/integration/test_status.py::a"), item("tests/unit/x/test_y.py::b"),
             item("tests/integration/test_lifecycle.py::c"),
             item("tests/integration/test_status.py::d"),
             item("tests/integration/test_lifecycle.py::e")]
    assert [i.nodeid.rsplit("::", 1)[1] for i in rackorder.ordered(items)] == \
        ["c", "e", "a", "d", "b"]
