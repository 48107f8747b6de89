"""strata.monitor"""
