"""What a node is, learned in ONE round trip: each kind of fact is one `Fact`, its node-side
function and its parser together, in the module of its topic; one node script
(sparkrack/remote/gather.py) answers a round trip's queries at once
(docs/internals.md#the-facts-script).

- sections.py  the one section format of the node script's output, and its one parser
- queries.py   Fact and its registry, Query, the argv that asks a node a round trip's
               queries, Answers
- node.py      node facts (status, gates, restarts, watchdog) and the cap-this-boot rule
- provision.py provisioning's: files, units, HCAs, guards, images, netdevs, netplan's files
- netplan.py   the daemon netplan renders the fabric with, and whether it runs
- onboard.py   onboarding's: the docker daemon and the RoCE / NCCL links
- records.py   the deployment records on the head
- watchdog.py  the watchdog service's node: its Python, what is installed, the unit
"""
