"""Rehearse your own rack: its shape captured in one file (`invoke facts.capture`), what
changed since a capture (`--diff`), and a rehearsal rack built as its twin.

- capture.py: the capture over the fleet, its file (versioned YAML) written and read;
- fileshape.py: a capture file's nodes checked as it is read (file:line);
- diff.py: two captures compared, one line a change (pure);
- build.py: the twin built from a capture; trust.py: what it takes from one (a file from
  elsewhere) and where it writes, checked first.
"""
