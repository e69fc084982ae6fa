"""The engines' compile cache folders on the nodes.

The `caches` collection: `invoke caches` (its default task) lists them, `caches.remove`
deletes the ones no lane keeps: never one a running container mounts, nor the current or
last-good deployment's (lifecycle/cachefolders.py)."""

from invoke.exceptions import Exit

from sparkrack.cli.common import (
    INVENTORY_HELP,
    WAIT_HELP,
    inventory_from,
    operator_task,
    rack_task,
)
from sparkrack.cli.flags import LIMIT_HELP, RENAMED_LIMIT, task
from sparkrack.core import console
from sparkrack.core.errors import UsageError

COLLECTION = "caches"

def _found(fleet, rack, limit):
    """(the folders on the selected nodes with what keeps each, errors)."""
    from sparkrack.lifecycle.cachefolders import kept, list_folders

    folders, errors = list_folders(fleet, rack.select(limit) if limit else rack.nodes)
    kept(fleet, rack, folders)
    return folders, errors


def _rows(folders, total):
    from sparkrack.transfer.manifest import size_text

    return [[f.name, f.engine, f.image_id[:12], f.arch,
             "all" if len(f.nodes) == total else ",".join(sorted(f.nodes)),
             size_text(max(f.nodes.values(), default=0)), f.files,
             "; ".join(f.kept) or "nothing (removable)"] for f in folders]


@task(name="list", default=True, renamed=RENAMED_LIMIT, help={"limit": LIMIT_HELP, "json": "print JSON",
                                            "inventory": INVENTORY_HELP})
@operator_task
def list_(c, limit=None, json=False, inventory=None):
    """List the compile cache folders on the nodes, with their sizes.

    Each folder's engine, image, GPU arch, size on each node, and what keeps it (a running
    container, the current or last-good deployment)."""
    from sparkrack.fleet import Fleet

    rack = inventory_from(inventory)
    with Fleet(rack) as fleet:
        folders, errors = _found(fleet, rack, limit)
    if json:
        console.print_json({"folders": [f.as_dict() for f in folders], "unreachable": errors})
    else:
        console.print_table("compile caches (/var/lib/sparkrack/engine-cache)",
                            ["folder", "engine", "image", "arch", "nodes", "size a node",
                             "files", "kept by"], _rows(folders, len(rack.nodes)))
    for node, error in errors.items():
        console.say(f"{node}: {error}")
    if errors:
        raise Exit(code=1)


@task(renamed=RENAMED_LIMIT, help={"folder": "only this folder (a name `invoke caches` shows); default: every "
                      "folder no lane keeps",
            "limit": LIMIT_HELP, "check": "say what would be removed; remove nothing",
            "json": "print JSON", "inventory": INVENTORY_HELP, **WAIT_HELP})
@rack_task(changing=lambda a: not a["check"], name="caches.remove")
def remove(c, folder=None, limit=None, check=False, json=False, inventory=None):
    """Remove the compile cache folders that no lane keeps.

    Kept: a folder a running container mounts, and those of the current or last-good
    deployment's image. The next start of a removed folder's image compiles again."""
    from sparkrack.engines.compilecaches import CACHE_ROOT
    from sparkrack.fleet import Fleet
    from sparkrack.lifecycle.cachefolders import remove_folders
    from sparkrack.oplock.audit import note
    from sparkrack.transfer.manifest import size_text

    rack = inventory_from(inventory)
    with Fleet(rack) as fleet:
        folders, errors = _found(fleet, rack, limit)
        if errors:
            raise UsageError("cannot judge every node's caches: " + "; ".join(
                f"{n}: {e}" for n, e in errors.items()), fix="run again once every node answers")
        if folder is not None:
            folders = [f for f in folders if f.name == folder]
            if not folders:
                raise UsageError(f"no compile cache folder {folder!r} on the nodes",
                                 fix="`invoke caches` lists them")
            if folders[0].kept:
                raise UsageError(f"{folder} is in use: {'; '.join(folders[0].kept)}",
                                 fix="`invoke down` or `invoke roll` to another image first")
        doomed = [f for f in folders if not f.kept]
        removed = remove_folders(fleet, doomed, check=check)
    if not check:
        note(nodes=sorted(removed), files=[f"{CACHE_ROOT}/{f.name}" for f in doomed])
    failed = {f"{n} {name}": v["error"] for n, found in removed.items()
              for name, v in found.items() if v.get("error")}
    if json:
        console.print_json({"check": check, "removed": removed,
                            "kept": {f.name: f.kept for f in folders if f.kept}})
    else:
        verb = "would remove" if check else "removed"
        rows = [[f.name, verb, ",".join(sorted(f.nodes)),
                 size_text(sum(removed.get(n, {}).get(f.name, {}).get("bytes", 0)
                               for n in f.nodes))] for f in doomed]
        rows += [[f.name, "kept: " + "; ".join(f.kept), ",".join(sorted(f.nodes)), "-"]
                 for f in folders if f.kept]
        console.print_table("caches.remove" + (" (check: nothing removed)" if check else ""),
                            ["folder", "what", "nodes", "bytes"], rows)
    if failed:
        raise Exit("not removed: " + "; ".join(f"{k}: {v}" for k, v in failed.items()),
                   code=1)
