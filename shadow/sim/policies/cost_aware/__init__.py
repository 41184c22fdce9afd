"""The cost-aware family's policies (each module's ``SPEC.family``)."""
