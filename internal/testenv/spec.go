// A multi-aggregate pipeline spec shared by the tests that run one (ops' verify, the crash tests),
// so they exercise one shape. Invariant: its rollup is a sum of its base (sales_region_hour of
// sales_minute by region and hour), which the crash test checks in every consistent snapshot.

package testenv

// SalesSpec is a configuration file's pipeline block: a base table per minute by (region, shop,
// sku), its hourly rollup by region and a filtered hourly table with min and max.
const SalesSpec = `
pipeline:
  input:
    fields:
      shop: string(16)
      region: string(8)
      status: string(16)
      sku: string(64)
      amount: decimal(4)
    event_time: {field: ts, format: epoch_ms}
  aggregates:
    - table: sales_minute
      window: 1m
      dimensions: [{column: region, field: region}, {column: shop, field: shop}, {column: sku, field: sku}]
      measures: [{column: orders, kind: count}, {column: revenue, kind: sum, field: amount}]
    - table: sales_region_hour
      window: 1h
      dimensions: [{column: region, field: region}]
      measures: [{column: orders, kind: count}, {column: revenue, kind: sum, field: amount}]
    - table: paid_sku_hour
      window: 1h
      dimensions: [{column: sku, field: sku}]
      measures:
        - {column: orders, kind: count}
        - {column: cheapest, kind: min, field: amount}
        - {column: dearest, kind: max, field: amount}
        - {column: revenue, kind: sum, field: amount}
      filter: {field: status, in: [paid, shipped]}
`
