"""The partial-node family's policies (each module's ``SPEC.family``)."""
