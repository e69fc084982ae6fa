"""The rehearsal rack's faults, one family per module (power, network, gpu, kernel,
fabric), each a mixin of RehearsalRack (rack.py): what an operator meets on a real rack,
made on purpose (docs/rehearsal.md#faults)."""
