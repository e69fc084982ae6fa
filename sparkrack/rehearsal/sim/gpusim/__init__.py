"""The simulated GB10 of a rehearsal node (stdlib only): gpusimd, the daemon that stands in
for the driver, its client (nvidia-smi, gpu-sim and the stub engines speak through it) and
the state, physics and node files behind it. Runs in the nodes from
/usr/local/lib/sparkrack-sim/gpusim/, imported as the top-level package `gpusim`."""
