"""The rehearsal rack: eight local nodes (systemd-nspawn, real sshd/systemd/dockerd) with a
simulated GB10 GPU, RoCE HCAs and unified memory. A product feature the core never imports."""
