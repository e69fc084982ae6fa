# Remove the watchdog's directories (sparkrack/watchdog/uninstall.py):
# argv MARKER INSTALL_DIR STATE_DIR... The install directory ('' for none) goes only while
# it is a directory, not a link, carrying MARKER (or lib/.sparkrack-manifest: installed
# before the marker); otherwise nothing is removed and the exit code is 3.
set -e
marker=$1; d=$2; shift 2
if [ -n "$d" ]; then
  if [ -L "$d" ] || [ ! -d "$d" ] || { [ ! -f "$d/$marker" ] && [ ! -f "$d/lib/.sparkrack-manifest" ]; }; then
    echo "$d: no $marker in it: not a directory watch.install made; not removed" >&2
    exit 3
  fi
fi
for state in "$@"; do rm -rf -- "$state"; done
if [ -n "$d" ]; then rm -rf -- "$d"; fi
