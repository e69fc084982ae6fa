"""One SNMPv3 GET or SET against the PDU (pysnmp's asyncio API, run to completion).

Every request is authPriv: HMAC-SHA-96 authentication and AES-128 privacy (RFC 3414,
RFC 3826), what APC's network management cards offer for SNMPv3. The user and both keys
come from the environment variables the inventory's `pdu:` section names, are never read
from a file, and never appear in an error, a log line or the audit record. The PDU's
address passes the network guard first, as a node's does.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sparkrack.core.errors import SparkrackError, UnsafeAddressError
from sparkrack.fleet.netguard import check_device
from sparkrack.inventory.pdu import PduConfig

TIMEOUT_S = 2.0
RETRIES = 1
MIN_KEY_CHARS = 8  # RFC 3414: a passphrase shorter than 8 octets is refused


class PduError(SparkrackError):
    """The PDU could not be read or would not do what was asked; one line naming it."""


@dataclass(frozen=True)
class Credentials:
    """The SNMPv3 user and keys, as the environment gave them (never shown)."""

    user: str
    auth_key: str = field(repr=False)
    priv_key: str = field(repr=False)


def credentials(pdu: PduConfig, environ: Mapping[str, str] = os.environ) -> Credentials:
    """The PDU's credentials from the environment variables the inventory names."""
    names = (pdu.user_env, pdu.auth_key_env, pdu.priv_key_env)
    missing = [name for name in names if not environ.get(name)]
    if missing:
        raise PduError(f"PDU {pdu.name}: {', '.join(missing)} not set",
                       fix="export its SNMPv3 user, auth and priv keys there: sparkrack "
                       "stores none")
    short = [name for name in names[1:] if len(environ[name]) < MIN_KEY_CHARS]
    if short:
        raise PduError(f"PDU {pdu.name}: {', '.join(short)} shorter than {MIN_KEY_CHARS} "
                       "characters", fix="SNMPv3 keys are at least 8 characters (RFC 3414)")
    return Credentials(*(environ[name] for name in names))


class Session:
    """Requests to one PDU with one set of credentials."""

    def __init__(self, pdu: PduConfig, environ: Mapping[str, str] = os.environ):
        self.pdu = pdu
        self.creds = credentials(pdu, environ)
        try:
            self.address = check_device(f"PDU {pdu.name}", pdu.address, pdu.port)
        except UnsafeAddressError as error:
            raise PduError(error.message, fix="put the PDU's real address in the "
                           "inventory's pdu: section") from None

    def get(self, oids: Sequence[str]) -> dict[str, int | str | bytes]:
        """{oid: value} for every oid, in one GET (an OCTET STRING, text or BITS, as its
        octets); PduError for an object it lacks."""
        from pysnmp.hlapi.v3arch.asyncio import get_cmd

        found = self._run(get_cmd, [(oid, None) for oid in oids])
        values = {}
        for name, value in found:
            kind = value.__class__.__name__
            if kind in ("NoSuchObject", "NoSuchInstance", "EndOfMibView"):
                raise PduError(f"PDU {self.pdu.name} ({self.pdu.address}) has no {name}",
                               fix=f"does it answer the objects of pdu.model {self.pdu.model}? "
                               "(docs/engines.md#the-pdu)")
            values[str(name)] = (bytes(value.asOctets()) if hasattr(value, "asOctets")
                                 else int(value))
        return values

    def set(self, pairs: Sequence[tuple[str, int]]) -> None:
        """Set each oid to its integer value, in one SET."""
        from pysnmp.hlapi.v3arch.asyncio import set_cmd

        self._run(set_cmd, list(pairs))

    def _run(self, command, pairs: list[tuple[str, int | None]]) -> list:
        """One request, run to completion; [(name, value)] of the answer."""
        return asyncio.run(self._request(command, pairs))

    async def _request(self, command, pairs: list[tuple[str, int | None]]) -> list:
        from pysnmp.hlapi.v3arch.asyncio import (
            USM_AUTH_HMAC96_SHA,
            USM_PRIV_CFB128_AES,
            ContextData,
            Integer32,
            ObjectIdentity,
            ObjectType,
            SnmpEngine,
            UdpTransportTarget,
            UsmUserData,
        )

        engine = SnmpEngine()
        try:
            target = await UdpTransportTarget.create((self.address, self.pdu.port),
                                                     timeout=TIMEOUT_S, retries=RETRIES)
            user = UsmUserData(self.creds.user, self.creds.auth_key, self.creds.priv_key,
                               authProtocol=USM_AUTH_HMAC96_SHA,
                               privProtocol=USM_PRIV_CFB128_AES)
            binds = [ObjectType(ObjectIdentity(oid)) if value is None else
                     ObjectType(ObjectIdentity(oid), Integer32(value)) for oid, value in pairs]
            indication, status, index, answer = await command(
                engine, user, target, ContextData(), *binds, lookupMib=False)
        finally:
            engine.close_dispatcher()
        where = f"PDU {self.pdu.name} ({self.pdu.address}:{self.pdu.port})"
        if indication:
            raise PduError(f"{where}: {indication}", fix="is it on, on the management "
                           "network, and are its SNMPv3 user and keys the ones exported?")
        if status:
            failed = pairs[int(index) - 1][0] if index and int(index) <= len(pairs) else ""
            raise PduError(f"{where}: {status.prettyPrint()}{' at ' + failed if failed else ''}",
                           fix="the PDU refused the request: does the user have write access?")
        return [(bind[0], bind[1]) for bind in answer]
