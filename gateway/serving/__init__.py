"""The hot path's service layer: capacity (placement, leases, loads, evictions), dispatch, and
the request pipeline that ties them to request events and timings."""
