# An object as the guard must leave it: without the fields the API server manages.
# One normalizer for the demo, the benchmark and the tests (tests/support `content`).
del(.metadata.resourceVersion, .metadata.managedFields, .metadata.generation, .metadata.creationTimestamp, .metadata.uid)
