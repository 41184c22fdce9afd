"""The adaptive family's policies (each module's ``SPEC.family``)."""
