# What the rehearsal node's dockerd can give (sparkrack/lifecycle/nodelimits.py): no argv
pid=$(pidof dockerd | cut -d' ' -f1)
echo "memlock $(awk '/^Max locked memory/ {print $5}' /proc/$pid/limits)"
echo "nofile $(awk '/^Max open files/ {print $5}' /proc/$pid/limits)"
for d in /dev/infiniband; do [ -d "$d" ] && [ -n "$(ls -A "$d")" ] && echo "device $d"; done
tr '\0' '\n' < /proc/$pid/environ | sed -n 's/^PATH=//p' | tr ':' '\n' | while read -r dir; do
  [ -x "$dir/nvidia-container-runtime-hook" ] && echo "gpu-hook $dir" && break
done
true
