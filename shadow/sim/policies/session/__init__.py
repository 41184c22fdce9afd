"""The session family's policies (each module's ``SPEC.family``)."""
