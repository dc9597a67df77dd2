"""Datasets and LightningDataModules, one per data format."""
