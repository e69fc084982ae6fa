"""Power safety: the rack's one power lever is the GPU clock cap (GB10 has no power limit).

- burn.py: the burn check, the proof that a cap holds (the SM clock under load), and the
  latch it catches;
- gateburn.py: the gates' burn (one function, its length a setting in its range);
- power.py: the rack's projected draw against the strip, from each node's cap state.
"""
