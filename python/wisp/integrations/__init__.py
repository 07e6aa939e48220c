# SPDX-License-Identifier: Apache-2.0
"""Integrations of wisp with frameworks: ``wisp.integrations.torch`` (needs torch)."""
