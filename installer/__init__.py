"""strata.installer"""
