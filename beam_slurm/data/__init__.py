"""Data preparation: DAPO-Math-17K, AIME 2024 and AIME 2025 into the cleaned parquet files the recipe trains on."""
