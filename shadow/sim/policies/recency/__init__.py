"""The recency family's policies (each module's ``SPEC.family``)."""
