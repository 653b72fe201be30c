/* focus.h - the billing export in FinOps FOCUS 1.2 columns:
 *   GET /admin/v1/billing/focus?period=YYYY-MM[&tenant_id=ID][&format=csv|parquet]
 * as text/csv or as Apache Parquet (parquet.h: typed columns, nulls where the CSV is empty).
 * One row per tenant, SKU, resource (the job) and UTC day, and per charge category: an attempt lost with
 * its node is a Usage row and a Credit row of its own that takes it back. The rows sum the database's
 * cost lines (migration 0006), as GET /v1/costs does, so each tenant's BilledCost adds up to its costs
 * there for the same days. Provider, publisher and invoice issuer are $WHET_BILLING_PROVIDER ("whet"). */
#ifndef WHET_GATEWAY_FOCUS_H
#define WHET_GATEWAY_FOCUS_H

struct http_router;

void focus_routes(struct http_router *rt);

#endif
