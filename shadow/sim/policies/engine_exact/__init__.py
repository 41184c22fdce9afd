"""The engine-exact family's policies (each module's ``SPEC.family``)."""
