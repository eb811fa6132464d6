"""Definitions and their validation: operators' WorkflowTemplate and AddonProfile documents,
validated into the specs runs snapshot, and applied to the database.
"""
