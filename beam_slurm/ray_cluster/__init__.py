"""ray_cluster"""
