"""The watchdog's key on its node (watchdog/ship.py): argv PATH COMMENT. Reads the
ed25519 key at PATH, or makes one (0600, its directory 0700); writes PATH.pub with COMMENT;
prints the public key. Runs by the service's Python with its lib/ on PYTHONPATH, where
cryptography is."""

import os
import sys


def write(target, data, mode):
    fd = os.open(target + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(target + ".tmp", target)


def main():
    from cryptography.hazmat.primitives import serialization as s
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path = sys.argv[1]
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    os.chmod(os.path.dirname(path), 0o700)
    if os.path.isfile(path) and os.path.getsize(path) > 0:
        with open(path, "rb") as handle:
            key = s.load_ssh_private_key(handle.read(), password=None)
    else:
        key = Ed25519PrivateKey.generate()
        write(path, key.private_bytes(s.Encoding.PEM, s.PrivateFormat.OpenSSH,
                                      s.NoEncryption()), 0o600)
    public = key.public_key().public_bytes(s.Encoding.OpenSSH, s.PublicFormat.OpenSSH)
    write(path + ".pub", public + b" " + sys.argv[2].encode() + b"\n", 0o644)
    print(public.decode())


if __name__ == "__main__":
    main()
