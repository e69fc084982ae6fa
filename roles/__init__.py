"""The provisioning roles, shipped in the wheel as the package `sparkrack.roles`.

    site.yml                     the roles `invoke provision` runs, in order
    <role>/defaults/main.yml     the role's own variables (inventory vars win)
    <role>/tasks/main.yml        its tasks, one module each (sparkrack/provision/modules/)
    <role>/handlers/main.yml     tasks run once, at the end, when notified
    <role>/templates/*.j2        Jinja2 templates

This file only makes the folder a package (pyproject.toml maps it: package-dir), so that
sparkrack.data.shipped("roles") finds it with importlib.resources in a checkout installed
with `pip install -e .` as in an installed wheel. An inventory's `.sparkrack/roles/`
overrides a role or site.yml (docs/provisioning.md).
"""
