"""Where and how the Nomad runtime reaches Nomad: its settings with the ``NOMAD_*`` variables
the Nomad CLI reads as defaults (``NOMAD_ADDR``, ``NOMAD_TOKEN``, ``NOMAD_NAMESPACE``,
``NOMAD_REGION``, ``NOMAD_CACERT``, ``NOMAD_CLIENT_CERT``, ``NOMAD_CLIENT_KEY``), each kept with
where it came from for the errors that ask to fix it, and the TLS context calls are made with."""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from typing import Any

import attrs

from rock_core.errors import InvalidParameter, RuntimeFailure
from rock_nomad._api import NomadApi, Setting
from rock_nomad._options import PATH, NomadOptions

__all__ = ["Connection"]


def _setting_source(name: str, given: Any, env: str | None) -> Setting:
    if given is not None:
        return Setting(
            name,
            "set in [plugins.nomad], [engine.runtime_options] or ROCK_PLUGIN_NOMAD_" + name.upper(),
        )
    if env and os.environ.get(env):
        return Setting(name, f"taken from {env}")
    return Setting(name, "not set: the default")


@attrs.frozen(kw_only=True)
class Connection:
    """Nomad's address and credentials as the runtime calls it (settings, else ``NOMAD_*``)."""

    address: str
    token: str | None
    namespace: str
    region: str | None
    ca_cert: str | None
    client_cert: str | None
    client_key: str | None
    tls_skip_verify: bool
    #: Where each setting came from, for the errors that ask to fix it.
    settings: Mapping[str, Setting]

    @classmethod
    def from_options(cls, options: NomadOptions) -> Connection:
        """The connection ``options`` ask for, ``NOMAD_*`` filling what they leave unset.

        :raises InvalidParameter: an address that is not ``http(s)://host:port``, or only one
            of ``client_cert`` and ``client_key``.
        """
        env = os.environ
        settings = {
            "address": _setting_source("address", options.address, "NOMAD_ADDR"),
            "token": _setting_source("token", options.token, "NOMAD_TOKEN"),
            "namespace": _setting_source("namespace", options.namespace, "NOMAD_NAMESPACE"),
            "region": _setting_source("region", options.region, "NOMAD_REGION"),
            "ca_cert": _setting_source("ca_cert", options.ca_cert, "NOMAD_CACERT"),
            "client_cert": _setting_source("client_cert", options.client_cert, "NOMAD_CLIENT_CERT"),
        }
        address = (options.address or env.get("NOMAD_ADDR") or "http://127.0.0.1:4646").rstrip("/")
        if not address.startswith(("http://", "https://")):
            raise InvalidParameter(
                f"{PATH}.address: expected http://host:port or https://host:port, got {address!r}",
                field=f"{PATH}.address",
                value=address,
            )
        client_cert = options.client_cert or env.get("NOMAD_CLIENT_CERT") or None
        client_key = options.client_key or env.get("NOMAD_CLIENT_KEY") or None
        if bool(client_cert) != bool(client_key):
            raise InvalidParameter(
                f"{PATH}.client_cert and client_key: set both or neither",
                field=f"{PATH}.client_cert",
            )
        return cls(
            address=address,
            token=options.token if options.token is not None else env.get("NOMAD_TOKEN") or None,
            namespace=options.namespace or env.get("NOMAD_NAMESPACE") or "default",
            region=options.region or env.get("NOMAD_REGION") or None,
            ca_cert=options.ca_cert or env.get("NOMAD_CACERT") or None,
            client_cert=client_cert,
            client_key=client_key,
            tls_skip_verify=options.tls_skip_verify,
            settings=settings,
        )

    def open_api(self, *, timeout: float, max_connections: int) -> NomadApi:
        """A client of Nomad's API over this connection.

        :raises RuntimeFailure: a TLS file that cannot be read, naming its setting.
        """
        return NomadApi(
            self.address,
            token=self.token,
            namespace=self.namespace,
            region=self.region,
            verify=self.tls(),
            cert=None,
            timeout=timeout,
            max_connections=max_connections,
            settings=dict(self.settings),
        )

    def tls(self) -> ssl.SSLContext | bool:
        """The TLS context Nomad's API is called with: its certificate checked against
        ``ca_cert`` (else the system's CAs), and ``client_cert``/``client_key`` shown when
        Nomad asks for one (``verify_https_client``).

        :raises RuntimeFailure: a file that cannot be read, naming its setting.
        """
        if not self.address.startswith("https://"):
            return True
        setting = "ca_cert"
        try:
            if self.tls_skip_verify:
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            else:
                context = ssl.create_default_context(cafile=self.ca_cert)
            if self.client_cert and self.client_key:
                setting = "client_cert"
                context.load_cert_chain(self.client_cert, self.client_key)
        except (OSError, ssl.SSLError) as exc:
            value = (
                self.ca_cert
                if setting == "ca_cert"
                else f"{self.client_cert}, key {self.client_key}"
            )
            raise RuntimeFailure(
                f"cannot use the TLS files of {self.settings[setting]} and client_key ({value}): {exc}",
                attempted="nomad call",
            ) from exc
        return context
