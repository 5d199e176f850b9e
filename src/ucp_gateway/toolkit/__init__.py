"""The partner toolkit: sign a request as a UCP platform, verify captured messages, make agent keys
(``ucp-gateway sign``, ``verify``, ``keys generate-agent``). Built on httpsig (the same verifier
and debug view the gateway uses), versions (profile shapes) and the transports' agent key; nothing
imports it but the CLI."""
