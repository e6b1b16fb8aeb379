package dates

// Since 2024 this test exists.
