"""Data preparation: the cleaned DAPO-Math-17K and AIME parquet files and their manifest."""
