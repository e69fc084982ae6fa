"""Wait for the watchdog's first poll (watchdog/install.py): argv URL SECONDS. Prints `ok`
(exit 0) once URL serves sparkrack_watchdog_last_poll_timestamp_seconds, else why not
(exit 1) when SECONDS have passed."""

import sys
import time
import urllib.request


def main():
    url, deadline = sys.argv[1], time.monotonic() + float(sys.argv[2])
    last = "nothing listens yet"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                lines = answer.read().decode().splitlines()
            if any(l.startswith("sparkrack_watchdog_last_poll_timestamp_seconds ")
                   for l in lines):
                print("ok")
                sys.exit(0)
            last = "serving, but no poll has ended yet"
        except OSError as error:
            last = str(error)
        time.sleep(0.5)
    print("no poll seen at " + url + ": " + last)
    sys.exit(1)


if __name__ == "__main__":
    main()
