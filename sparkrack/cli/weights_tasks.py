"""A model directory on every node (sparkrack/transfer).

The `weights` collection: `weights.stage` copies it through the pipelined chain,
`weights.verify` checks every node against the manifest, `weights.list` shows the staged
models, `weights.remove` deletes one (refused while a deployment uses it)."""

from invoke.exceptions import Exit

from sparkrack.cli.common import (
    INVENTORY_HELP,
    WAIT_HELP,
    inventory_from,
    operator_task,
    rack_task,
)
from sparkrack.cli.flags import LIMIT_HELP, QUIET_HELP, RENAMED_LIMIT, task
from sparkrack.core import console
from sparkrack.core.errors import UsageError

COLLECTION = "weights"

MODEL_HELP = "the model directory on the nodes (default: the inventory's model_path)"
PYTHON_HELP = "the nodes' Python for the node scripts (default /usr/bin/python3)"


def _model(rack, model):
    """The --model path, checked (default: the inventory's model_path)."""
    from sparkrack.inventory.values import abs_path_problem

    if model is None:
        return rack.vars.model_path.rstrip("/")
    problem = abs_path_problem(model)
    if problem:
        raise UsageError(f"--model {model!r} {problem}",
                         fix="give the model directory's absolute path on the nodes, "
                         "e.g. --model /models/GLM-5.3-NVFP4")
    return model.rstrip("/")


def _nodes(rack, limit):
    """The --limit selection (default: every node)."""
    return rack.select(limit) if limit else rack.nodes


def _source(rack, from_, source, model):
    """Where the model comes from: --source DIR here, --from NODE, else the head."""
    from pathlib import Path

    from sparkrack.transfer.weights import Source

    if from_ and source:
        raise UsageError("--from and --source both given", fix="name one source: a node "
                         "(--from NODE) or a directory on this machine (--source DIR)")
    if source:
        path = Path(source).expanduser()
        if not path.is_dir():
            raise UsageError(f"--source {source}: not a directory on this machine",
                             fix="give the local model directory, or --from NODE")
        return Source(str(path.resolve()))
    name = from_ or rack.head.name
    node = next((n for n in (*rack.nodes, *rack.spares) if n.name == name), None)
    if node is None:
        raise UsageError(f"--from {name}: no such node in {rack.path}",
                         fix="nodes: " + ", ".join(n.name for n in rack.nodes))
    return Source(model, node)


@task(renamed=RENAMED_LIMIT, help={"model": MODEL_HELP, "from_": "the node holding the model at the same path "
            "(default: the head)", "source": "a model directory on this machine instead",
            "limit": LIMIT_HELP, "bwlimit": "MiB/s cap at the source (spares the fabric of "
            "a serving rack)", "full_verify": "re-hash the files already on the nodes (ignore "
            "their hash cache)", "check": "say what would be copied where; change nothing",
            "json": "print the report as JSON", "python": PYTHON_HELP, "quiet": QUIET_HELP,
            "inventory": INVENTORY_HELP, **WAIT_HELP})
@rack_task(changing=lambda a: not a["check"], name="weights.stage")
def stage(c, model=None, from_=None, source=None, limit=None, bwlimit=None, full_verify=False,
          check=False, json=False, python=None, inventory=None, quiet=False):
    """Copy a model directory to every node through the pipelined chain.

    --limit: only those.

    The manifest (sparkrack-manifest.sha256) is made once at the source; files present and
    right are skipped, partial files resume, the manifest is written last on each node. Exit
    1 when a node is not complete afterwards."""
    from sparkrack.fleet import Fleet
    from sparkrack.oplock.audit import note
    from sparkrack.transfer.chain import DEFAULT_PYTHON
    from sparkrack.transfer.show import TransferProgress, print_stage
    from sparkrack.transfer.weights import stage as run_stage

    rack = inventory_from(inventory)
    path = _model(rack, model)
    origin = _source(rack, from_, source, path)
    targets = _nodes(rack, limit)
    rate = None
    if bwlimit is not None:
        rate = float(bwlimit) * 2**20
        if not rate > 0:
            raise UsageError(f"--bwlimit {bwlimit!r} is not a positive number of MiB/s",
                             fix="e.g. --bwlimit 500")
    members = {n.name: n for n in (*targets, *([origin.node] if origin.node else []))}
    with Fleet(rack, list(members.values())) as fleet, \
            TransferProgress([t.name for t in targets], quiet=quiet, silent=json) as progress:
        report = run_stage(fleet, origin, targets, path, python=python or DEFAULT_PYTHON,
                           bwlimit=rate, full_verify=full_verify, check=check,
                           on_event=(lambda line: None) if json else
                           (lambda line: console.say(f"weights: {line}")),
                           on_progress=progress)
    if not check:
        note(nodes=sorted(n.node for n in report.nodes.values() if n.copied or
                          n.state == "completed"),
             files=[f"{path}/{name}" for name in report.copied], weights=report.digest)
    if json:
        console.print_json(report.as_dict())
    else:
        print_stage(report)
    if report.errors:
        raise Exit(code=1)


@task(renamed=RENAMED_LIMIT, help={"model": MODEL_HELP, "full": "hash every file against the manifest (default: "
            "sizes against the rack's)", "limit": LIMIT_HELP, "json": "print JSON",
            "python": PYTHON_HELP, "inventory": INVENTORY_HELP})
@operator_task
def verify(c, model=None, full=False, limit=None, json=False, python=None, inventory=None):
    """Every node's copy of the model against its manifest, one row per node.

    Exit 1 when a node lacks the manifest, holds another one, misses a file or holds one
    of another size (--full: another hash), or does not answer."""
    from sparkrack.fleet import Fleet
    from sparkrack.transfer.chain import DEFAULT_PYTHON
    from sparkrack.transfer.models import verify_model
    from sparkrack.transfer.show import print_verify

    rack = inventory_from(inventory)
    path = _model(rack, model)
    selected = _nodes(rack, limit)
    with Fleet(rack, selected) as fleet:
        digest, rows = verify_model(fleet, selected, path, full=full,
                                    python=python or DEFAULT_PYTHON)
    if json:
        console.print_json({"model_path": path, "digest": digest,
                            "nodes": [r.as_dict() for r in rows]})
    else:
        print_verify(path, digest, rows)
    bad = [r for r in rows if r.problems]
    if bad:
        raise Exit(f"{len(bad)} of {len(rows)} node(s) not complete: "
                   + ", ".join(r.node for r in bad)
                   + f" (run `invoke weights.stage --model {path}`)", code=1)


@task(name="list", help={"json": "print JSON", "python": PYTHON_HELP,
                         "inventory": INVENTORY_HELP})
@operator_task
def list_(c, json=False, python=None, inventory=None):
    """The model directories staged on the nodes, with their manifests.

    Beside the inventory's and the profiles' model paths: manifest digest and nodes, size,
    partial copies, the profiles using it."""
    import posixpath

    from sparkrack.fleet import Fleet
    from sparkrack.lifecycle.modeluse import used_by
    from sparkrack.transfer.chain import DEFAULT_PYTHON
    from sparkrack.transfer.models import list_models
    from sparkrack.transfer.show import print_list

    rack = inventory_from(inventory)
    used = used_by(rack)
    parents = sorted({posixpath.dirname(p) for p in (*used, rack.vars.model_path.rstrip("/"))})
    with Fleet(rack) as fleet:
        models, errors = list_models(fleet, rack.nodes, parents, python=python or DEFAULT_PYTHON)
    if json:
        console.print_json({"models": [m.as_dict() for m in models], "used_by": used,
                            "unreachable": errors})
    else:
        print_list(models, used)
    for node, error in errors.items():
        console.say(f"{node}: {error}")
    if errors:
        raise Exit(code=1)


@task(renamed=RENAMED_LIMIT, help={"model": "the model directory to remove from the nodes (required)",
            "limit": LIMIT_HELP, "check": "say what would be removed; remove nothing",
            "json": "print JSON", "python": PYTHON_HELP, "inventory": INVENTORY_HELP,
            **WAIT_HELP})
@rack_task(changing=lambda a: not a["check"], name="weights.remove")
def remove(c, model=None, limit=None, check=False, json=False, python=None, inventory=None):
    """Remove a staged model from the nodes: what its manifest lists.

    The files its manifest lists, partial files and the manifest (anything else in the
    directory stays). Refused while the current deployment runs from it."""
    from sparkrack.fleet import Fleet
    from sparkrack.lifecycle.modeluse import refuse_removal_in_use
    from sparkrack.oplock.audit import note
    from sparkrack.transfer.chain import DEFAULT_PYTHON
    from sparkrack.transfer.models import describe_removal, remove_model

    rack = inventory_from(inventory)
    if model is None:
        raise UsageError("weights.remove needs --model PATH",
                         fix="name the model directory, e.g. --model /models/OLD (see "
                         "`invoke weights.list`)")
    path = _model(rack, model)
    selected = _nodes(rack, limit)
    with Fleet(rack, list({n.name: n for n in (*selected, rack.head)}.values())) as fleet:
        refuse_removal_in_use(fleet, rack, path)
        removed = remove_model(fleet, selected, path, check=check,
                               python=python or DEFAULT_PYTHON)
    if not check:
        note(nodes=sorted(n for n, d in removed.items() if d["removed"]),
             files=[path])
    if json:
        console.print_json({"model_path": path, "check": check, "nodes": removed})
    else:
        console.print_table(f"weights.remove {path}" + (" (check: nothing removed)" if check
                                                        else ""),
                            ["node", "would remove" if check else "removed"],
                            [[n, describe_removal(d)] for n, d in removed.items()])
    failed = [n for n, d in removed.items() if d.get("error")]
    if failed:
        raise Exit(f"not removed on {', '.join(failed)}", code=1)
