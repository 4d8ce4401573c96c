"""Code that runs inside the sandbox: the zygote, the per-job init, and what they rely on.

Everything in this package uses the standard library only and imports its siblings relatively,
because inside the sandbox it runs on the system interpreter as a top-level package named
`guest`, with nothing of Tempering (or its dependencies) importable. The host imports the same
files as `tempering.sandbox.guest` to share the wire format and to unit-test the pieces.
"""
