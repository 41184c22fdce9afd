"""The oracle family's policies (each module's ``SPEC.family``)."""
