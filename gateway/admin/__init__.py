"""The operator's admin API (`/admin/v1/...`, bearer operator token), its OpenAPI document, the
`modelforge` admin verbs that call it, and the demo bootstrap `modelforge up` runs through it."""
