"""The frequency family's policies (each module's ``SPEC.family``)."""
