"""The rehearsal nodes' nvidia-smi (the script nvidia-smi here): its --query-gpu fields, -q
report and summary table, as a GB10 prints them. Imported as the top-level package `nvsmi`
beside `gpusim`; starts on C modules alone (the burn check runs it every half second)."""
