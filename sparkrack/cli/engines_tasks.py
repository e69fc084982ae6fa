"""What an engine image takes, read from the image.

The `engines` collection: `invoke engines.learn`, an engine version's option table, read
from its image on the head."""

from sparkrack.cli.common import INVENTORY_HELP, WAIT_HELP, inventory_from, rack_task
from sparkrack.cli.flags import task
from sparkrack.core import console

COLLECTION = "engines"


@task(help={"engine": "sglang or vllm",
            "image": "the image ref to read (default: the inventory's image for the engine); "
                     "it must be on the head node",
            "inventory": INVENTORY_HELP, "json": "print JSON for scripts", **WAIT_HELP},
      positional=[])
@rack_task(name="engines.learn")
def learn(c, engine=None, inventory=None, image=None, json=False):
    """Learn the options an engine image takes, from the image itself.

    Its own Python reads its installed sources on the head (no network, no GPU); they are
    kept as the inventory's table for its version.

    From then on `check`, `plan`, `up` and `roll` check that image's lanes against what it
    takes. Shows what changed from the nearest known version."""
    from sparkrack.core.errors import UsageError
    from sparkrack.learn.options import learn as learn_table

    if not engine:
        raise UsageError("no engine given", fix="pass --engine sglang or --engine vllm")
    learned = learn_table(inventory_from(inventory), engine, image)
    if json:
        console.print_json(learned.as_dict())
        return
    console.say(f"{learned.image} ({learned.image_id[:19]}) on {learned.node} runs {engine} "
                f"{learned.version}: {len(learned.options.takes)} option strings, read in "
                f"{learned.seconds:.1f} s")
    console.say(f"kept in {learned.file}")
    compared = learned.comparison
    for line in compared.lines() if compared else [f"no other table of {engine} to compare"]:
        console.say(line)
    for note in learned.notes:
        console.say(f"note: {note}")
