"""Airflow hooks of the provider."""

from __future__ import annotations
