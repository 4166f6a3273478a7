"""The ``headwater`` command line: imperative commands and the GitOps plan/apply flow."""
