"""The watchdog's power cycle as installed: the unit runs the service with
--allow-power-cycle and its own node's name (--node), the PDU's keys in a 0600 file shown
nowhere; what would keep the service from finishing a cycle of its own node."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

from test_watchdog_install import rehearsal_copy, unit_of

from sparkrack.inventory import load_inventory


def test_the_install_flag_reaches_the_units_command_line(tmp_path):
    unit, _ = unit_of(tmp_path, install_dir="/opt/sr", listen="10.77.1.11",
                      allow_power_cycle=True)
    assert unit["Service"]["ExecStart"].endswith(
        "--state /var/lib/sparkrack/watchdog/state.json --node spark-01 --allow-power-cycle")
    plain, _ = unit_of(tmp_path / "plain", install_dir="/opt/sr", listen="10.77.1.11")
    assert "--allow-power-cycle" not in plain["Service"]["ExecStart"]


def test_the_service_accepts_the_flag():
    shown = subprocess.run([sys.executable, "-m", "sparkrack.watchdog", "--help"],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "--allow-power-cycle" in shown.stdout


def test_the_service_knows_what_would_keep_it_from_finishing_its_own_cycle(tmp_path):
    """A cycle of its own node is finished by the service systemd starts at boot, from its
    state file: none, a tmpfs one (a power cut empties it), or no systemd: refused."""
    from sparkrack.watchdog.nodecycle import keeps_problem, mount_type

    mounts = ("22 1 0:21 / / rw,relatime shared:1 - overlay overlay rw\n"
              "25 22 0:23 / /run rw,nosuid shared:5 - tmpfs tmpfs rw\n"
              "26 22 8:1 / /var/lib rw,relatime shared:6 - ext4 /dev/sda1 rw\n"
              "27 25 0:24 / /run/a\\040b rw - ramfs ramfs rw\n")
    assert mount_type("/var/lib/sparkrack/watchdog", mounts) == "ext4"
    assert mount_type("/run/sparkrack", mounts) == "tmpfs"
    assert mount_type("/run/a b/x", mounts) == "ramfs"
    assert mount_type("/opt", mounts) == "overlay"
    unit = {"INVOCATION_ID": "0123abcd"}
    state = tmp_path / "state.json"
    assert keeps_problem(state, unit, f"1 0 0:1 / {tmp_path} rw - ext4 x rw\n") is None
    assert keeps_problem(None, unit, "") == "it keeps no state file"
    assert keeps_problem(state, {}, "") == ("it does not run as a systemd unit "
                                            "(watch.install's): nothing starts it again")
    assert keeps_problem(state, unit, f"1 0 0:1 / {tmp_path} rw - tmpfs x rw\n") == (
        f"its state file {state} is on tmpfs, which a power cut empties")


def watchdog_play(folder, keys, allowed=True, facts=None):
    """(changes, context) of play watchdog.yml on a rehearsal copy's head, installed into
    /opt/sr with keys as this machine's environment."""
    from test_watchdog_install import WANT

    from sparkrack.facts.provision import ProvisionFacts
    from sparkrack.facts.watchdog import NodeState
    from sparkrack.provision.plan import plan_node
    from sparkrack.provision.renderer import Renderer
    from sparkrack.provision.roles import (
        load_roles,
        node_vars,
        render_tasks,
        secret_values,
    )
    from sparkrack.watchdog import install as wi
    from sparkrack.watchdog import settings as ws_settings

    inventory = load_inventory(rehearsal_copy(folder))
    settings = ws_settings.with_listen(ws_settings.Settings(
        install_dir="/opt/sr", allow_power_cycle=allowed), inventory.head)
    extra = wi.role_vars(inventory, settings, NodeState(), WANT, keys)
    roles = load_roles(play="watchdog.yml")
    renderer = Renderer()
    context = node_vars(inventory, inventory.head, roles, {}, extra)
    changes = plan_node(roles, {r.name: render_tasks(r, r.tasks, context, renderer)
                                for r in roles},
                        {r.name: render_tasks(r, r.handlers, context, renderer) for r in roles},
                        context, facts or ProvisionFacts(), renderer=renderer,
                        secrets=secret_values(context))
    return changes, context


def test_allowed_the_service_gets_the_pdus_keys_in_a_0600_file_never_shown(tmp_path):
    """The keys reach the unit through an EnvironmentFile (0600) beside lib/; no summary or
    diff of the plan shows them, even with the file's own keys named oddly."""
    from sparkrack.provision.changes import Put

    keys = {"SPARKRACK_PDU_USER": "operator", "SPARKRACK_PDU_AUTH_KEY": 'auth"key$1\\x',
            "SPARKRACK_PDU_PRIV_KEY": "privkey-2345"}
    changes, _ = watchdog_play(tmp_path, keys)
    put = next(a for c in changes for a in c.actions
               if isinstance(a, Put) and a.path == "/opt/sr/pdu.env")
    assert put.mode == 0o600
    assert put.content.decode().splitlines()[1:] == [
        'SPARKRACK_PDU_AUTH_KEY="auth\\"key\\$1\\\\x"', 'SPARKRACK_PDU_PRIV_KEY="privkey-2345"',
        'SPARKRACK_PDU_USER="operator"']
    unit = next(a for c in changes for a in c.actions
                if isinstance(a, Put) and a.path.endswith("sparkrack-watchdog.service"))
    assert "\nEnvironmentFile=/opt/sr/pdu.env\n" in unit.content.decode()
    shown = "\n".join(f"{c.summary}\n{c.diff}" for c in changes)
    assert "/opt/sr/pdu.env: create (0600)" in shown
    assert "privkey-2345" not in shown and 'auth"key' not in shown and "auth\\" not in shown


def test_without_keys_the_file_goes_and_the_unit_reads_none(tmp_path, monkeypatch):
    """With none exported, no file and no EnvironmentFile."""
    for name in ("SPARKRACK_PDU_USER", "SPARKRACK_PDU_AUTH_KEY", "SPARKRACK_PDU_PRIV_KEY"):
        monkeypatch.delenv(name)
    unit, text = unit_of(tmp_path, install_dir="/opt/sr", listen="10.77.1.11")
    assert "EnvironmentFile" not in text
    inventory = load_inventory(rehearsal_copy(tmp_path / "again"))
    assert wi_vars(inventory, False) == {"watchdog_pdu_env": "", "watchdog_pdu_keys": [],
                                         "secret_values": []}


def test_not_allowed_to_cycle_the_keys_stay_on_this_machine(tmp_path):
    """Issue 53 item 3: the keys went to the watchdog's node whenever they were exported,
    and root there could switch every outlet though the service may cut none. Without
    --allow-power-cycle, whatever is exported: no pdu.env (an earlier one is removed), no
    EnvironmentFile, the keys nowhere in the play's vars."""
    from sparkrack.facts.files import FileFacts
    from sparkrack.facts.provision import ProvisionFacts
    from sparkrack.provision.changes import Put

    keys = {"SPARKRACK_PDU_USER": "operator", "SPARKRACK_PDU_AUTH_KEY": "authkey-1234",
            "SPARKRACK_PDU_PRIV_KEY": "privkey-2345"}
    inventory = load_inventory(rehearsal_copy(tmp_path))
    assert wi_vars(inventory, False, keys) == {"watchdog_pdu_env": "", "watchdog_pdu_keys": [],
                                               "secret_values": []}
    earlier = ProvisionFacts(files={"/opt/sr/pdu.env": FileFacts(
        exists=True, type="file", mode="600", owner="root", group="root", size=20,
        sha256="0" * 64)})
    changes, context = watchdog_play(tmp_path / "again", keys, allowed=False, facts=earlier)
    assert not any(isinstance(a, Put) and a.path == "/opt/sr/pdu.env"
                   for c in changes for a in c.actions)
    assert "/opt/sr/pdu.env: remove" in [c.summary for c in changes]
    unit = next(a for c in changes for a in c.actions
                if isinstance(a, Put) and a.path.endswith("sparkrack-watchdog.service"))
    assert "EnvironmentFile" not in unit.content.decode()
    assert "authkey-1234" not in repr(context) and "privkey-2345" not in repr(context)


def wi_vars(inventory, allowed, environ=None):
    from sparkrack.watchdog import install as wi
    from sparkrack.watchdog import settings as ws_settings

    return wi.pdu_env_vars(inventory, ws_settings.Settings(allow_power_cycle=allowed),
                           environ or {})


def test_allowed_without_keys_or_a_pdu_is_refused_before_any_change(tmp_path):
    import pytest

    from sparkrack.core.errors import SparkrackError, UsageError

    inventory = load_inventory(rehearsal_copy(tmp_path))
    with pytest.raises(SparkrackError) as unset:
        wi_vars(inventory, True, {"SPARKRACK_PDU_USER": "operator"})
    assert unset.value.line().startswith(
        "PDU rehearsal-pdu: SPARKRACK_PDU_AUTH_KEY, SPARKRACK_PDU_PRIV_KEY not set")
    no_pdu = dataclasses.replace(inventory, vars=dataclasses.replace(inventory.vars, pdu=None))
    with pytest.raises(UsageError, match="--allow-power-cycle, but the inventory has no pdu:"):
        wi_vars(no_pdu, True)


def test_allowed_on_a_metered_strip_is_refused_naming_its_model(tmp_path):
    """A metered-only PDU (pdu.model sentry4-metered) cannot cut a node's power: installing
    the watchdog to power-cycle through it is refused in one line naming the model."""
    import pytest

    from sparkrack.core.errors import UsageError

    inventory = load_inventory(rehearsal_copy(tmp_path))
    metered = dataclasses.replace(inventory, vars=dataclasses.replace(
        inventory.vars, pdu=dataclasses.replace(inventory.vars.pdu, model="sentry4-metered")))
    with pytest.raises(UsageError) as refused:
        wi_vars(metered, True, {"SPARKRACK_PDU_USER": "operator"})
    assert refused.value.line().startswith("--allow-power-cycle, but PDU rehearsal-pdu is a "
                                           "sentry4-metered: a metered strip that does not "
                                           "switch outlets")
    assert wi_vars(metered, False)["watchdog_pdu_keys"] == []  # reading needs no switching
