"""The control-plane core: one declarative model, one reconciler, shared by every way in.

The CLI, the kopf operator, the Terraform provider and the GitHub Actions all go through this
package. It reaches a server only over the NATS protocol (nats-py), like any user, and it never
imports ``headwater.server``.
"""
