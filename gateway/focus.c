/* focus.c - GET /admin/v1/billing/focus (see focus.h). Column ids, types and values follow FOCUS 1.2:
 * costs are decimals (BilledCost = EffectiveCost = ListCost = ContractedCost: no discounts or
 * commitments exist; DOUBLE in Parquet), times are ISO 8601 UTC with the end exclusive (Parquet:
 * timestamps in milliseconds, UTC), ChargeClass is null (a credit
 * for a lost attempt falls in the same period as its usage, so it corrects no earlier invoice),
 * ServiceCategory is "AI and Machine Learning". A tenant is both the billing account and the sub
 * account. Pricing quantities are in the price book's units (hours, 1000000 tokens, GB-months),
 * consumed quantities in plain ones (hours, tokens, GB-hours). */
#include "focus.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "db.h"
#include "parquet.h"

#define S PARQUET_STRING
#define D PARQUET_DOUBLE
#define T PARQUET_TIMESTAMP_MS
/* The export's columns, in order, with their FOCUS data types (Decimal, DateTime, String). */
static const struct parquet_column focus_columns[] = {
    {"BilledCost", D},        {"BillingAccountId", S},  {"BillingAccountName", S}, {"BillingCurrency", S},
    {"BillingPeriodStart", T}, {"BillingPeriodEnd", T}, {"ChargeCategory", S},     {"ChargeClass", S},
    {"ChargeDescription", S}, {"ChargePeriodStart", T}, {"ChargePeriodEnd", T},    {"ContractedCost", D},
    {"EffectiveCost", D},     {"InvoiceIssuerName", S}, {"ListCost", D},           {"PricingQuantity", D},
    {"PricingUnit", S},       {"ProviderName", S},      {"PublisherName", S},      {"ServiceCategory", S},
    {"ServiceName", S},       {"ConsumedQuantity", D},  {"ConsumedUnit", S},       {"SkuId", S},
    {"ResourceId", S},        {"ResourceType", S},      {"SubAccountId", S},       {"SubAccountName", S},
    {"ChargeFrequency", S},
};
#undef S
#undef D
#undef T
#define FOCUS_N_COLUMNS ((int)(sizeof focus_columns / sizeof focus_columns[0]))

/* Columns of focus_rows. */
enum {
    F_TENANT,
    F_TENANT_NAME,
    F_SKU_ID,
    F_JOB,
    F_DAY_START,
    F_DAY_END,
    F_CHARGE,
    F_CURRENCY,
    F_AMOUNT,
    F_PRICING_QTY,
    F_PRICING_UNIT,
    F_CONSUMED_QTY,
    F_CONSUMED_UNIT,
    F_DESCRIPTION
};

/* A CSV field: quoted (quotes doubled) when it holds a comma, a quote or a line break; NULL is empty. */
static void csv_field(struct whet_buf *b, const char *s, int last) {
    if (!s) {
        whet_buf_puts(b, last ? "\n" : ",");
        return;
    }
    if (strpbrk(s, ",\"\r\n")) {
        whet_buf_puts(b, "\"");
        for (const char *p = s; *p; p++) {
            if (*p == '"') whet_buf_puts(b, "\"\"");
            else whet_buf_append(b, p, 1);
        }
        whet_buf_puts(b, "\"");
    } else {
        whet_buf_puts(b, s);
    }
    whet_buf_puts(b, last ? "\n" : ",");
}

struct focus_ctx {
    char period_start[24], period_end[24];
    int parquet; /* format=parquet, else CSV */
};

static void focus_done(struct gw_req *r, const struct db_result *res, void *arg) {
    const struct focus_ctx *c = arg;
    if (db_reply_failed(r, res)) return;
    const PGresult *rows = res->res[0];
    const char *provider = getenv("WHET_BILLING_PROVIDER");
    if (!provider || !*provider) provider = "whet";
    int n_rows = PQntuples(rows);
    const char **cells = xcalloc((size_t)n_rows * FOCUS_N_COLUMNS + 1, sizeof *cells);
    for (int i = 0; i < n_rows; i++) {
#define V(col) PQgetvalue(rows, i, col)
        int credit = !strcmp(V(F_CHARGE), "credit");
        const char *fields[FOCUS_N_COLUMNS] = {V(F_AMOUNT),
                                V(F_TENANT),
                                V(F_TENANT_NAME),
                                V(F_CURRENCY),
                                c->period_start,
                                c->period_end,
                                credit ? "Credit" : "Usage",
                                NULL,
                                V(F_DESCRIPTION),
                                V(F_DAY_START),
                                V(F_DAY_END),
                                V(F_AMOUNT),
                                V(F_AMOUNT),
                                provider,
                                V(F_AMOUNT),
                                V(F_PRICING_QTY),
                                V(F_PRICING_UNIT),
                                provider,
                                provider,
                                "AI and Machine Learning",
                                "whet fine-tuning",
                                credit ? NULL : V(F_CONSUMED_QTY),
                                credit ? NULL : V(F_CONSUMED_UNIT),
                                V(F_SKU_ID),
                                V(F_JOB),
                                !strncmp(V(F_JOB), "ts-", 3)             ? "Training session" /* 0028 */
                                : strncmp(V(F_SKU_ID), "inference_", 10) ? "Fine-tuning job"
                                                                         : "Model",
                                V(F_TENANT),
                                V(F_TENANT_NAME),
                                "Usage-Based"};
#undef V
        memcpy(cells + (size_t)i * FOCUS_N_COLUMNS, fields, sizeof fields);
    }
    struct whet_buf out = {0};
    struct whet_err err;
    int rc = 0;
    if (c->parquet) {
        rc = parquet_write(&out, focus_columns, FOCUS_N_COLUMNS, cells, n_rows, &err);
    } else {
        for (int f = 0; f < FOCUS_N_COLUMNS; f++) csv_field(&out, focus_columns[f].name, f == FOCUS_N_COLUMNS - 1);
        for (int i = 0; i < n_rows; i++)
            for (int f = 0; f < FOCUS_N_COLUMNS; f++)
                csv_field(&out, cells[(size_t)i * FOCUS_N_COLUMNS + f], f == FOCUS_N_COLUMNS - 1);
    }
    free(cells);
    if (rc) { /* the database answered a value of the wrong type: a bug in focus_rows */
        whet_buf_free(&out);
        http_reply_error(r, 500, NULL, "internal_error", "the FOCUS export: %s", err.msg);
        return;
    }
    http_add_header(r, "content-disposition", http_printf(r, "attachment; filename=\"whet-focus-%.7s.%s\"",
                                                          c->period_start, c->parquet ? "parquet" : "csv"));
    http_reply_bytes(r, 200, c->parquet ? "application/vnd.apache.parquet" : "text/csv; charset=utf-8", out.data,
                     out.len);
}

/* "YYYY-MM" -> the month's first second and the next month's (Unix); -1 when malformed. */
static int period_parse(const char *s, long long *start, long long *end) {
    if (!s || strlen(s) != 7 || s[4] != '-') return -1;
    for (int i = 0; i < 7; i++)
        if (i != 4 && (s[i] < '0' || s[i] > '9')) return -1;
    int y = atoi(s), m = atoi(s + 5);
    if (y < 1970 || m < 1 || m > 12) return -1;
    /* Days from 1970-01-01 to the first of a month (proleptic Gregorian; Howard Hinnant's days_from_civil). */
    long long bounds[2];
    for (int k = 0; k < 2; k++) {
        int yy = y + (m + k > 12), mm = (m + k - 1) % 12 + 1;
        yy -= mm <= 2;
        long long era = yy / 400, yoe = yy - era * 400, doy = (153 * (mm + (mm > 2 ? -3 : 9)) + 2) / 5,
                  doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        bounds[k] = (era * 146097 + doe - 719468) * 86400;
    }
    *start = bounds[0];
    *end = bounds[1];
    return 0;
}

static void iso_time(long long t, char out[24]) {
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(out, 24, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void focus_get(struct gw_req *r) {
    long long start, end;
    const char *period = http_query_param(r, "period");
    if (period_parse(period, &start, &end) < 0) {
        http_reply_error(r, 400, "period", period ? "invalid_value" : "missing_required_parameter",
                         "period: expected a month as YYYY-MM (UTC), such as 2025-03");
        return;
    }
    const char *format = http_query_param(r, "format");
    if (format && strcmp(format, "csv") && strcmp(format, "parquet")) {
        http_reply_error(r, 400, "format", "invalid_value", "format: expected csv or parquet");
        return;
    }
    struct focus_ctx *c = http_alloc(r, sizeof *c);
    c->parquet = format && !strcmp(format, "parquet");
    iso_time(start, c->period_start);
    iso_time(end, c->period_end);
    const char *p[] = {http_printf(r, "%lld", start), http_printf(r, "%lld", end), http_query_param(r, "tenant_id")};
    db_query(r, "focus_rows", 3, p, focus_done, c);
}

void focus_routes(struct http_router *rt) {
    db_prepare(
        "focus_rows",
        "SELECT l.tenant_id, t.name, l.sku || CASE WHEN l.sku = 'device_hour' THEN ':' || l.device_type ELSE '' END, "
        "coalesce(l.job_id, l.model), "
        "to_char(to_timestamp(l.day) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), "
        "to_char(to_timestamp(l.day + 86400) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), l.charge, "
        "min(l.currency), sum(l.amount), sum(l.quantity), "
        "CASE min(l.unit) WHEN 'device-hour' THEN 'Hours' WHEN '1M tokens' THEN '1000000 Tokens' ELSE 'GB-Months' END, "
        "sum(l.quantity) * CASE min(l.unit) WHEN '1M tokens' THEN 1000000 WHEN 'GB-month' THEN 730 ELSE 1 END, "
        "CASE min(l.unit) WHEN 'device-hour' THEN 'Hours' WHEN '1M tokens' THEN 'Tokens' ELSE 'GB-Hours' END, "
        "CASE WHEN l.charge = 'credit' THEN 'Credit for device time of attempts lost with their node (' "
        "  || l.device_type || ')' WHEN l.sku = 'device_hour' THEN l.device_type || ' device hours' "
        "  WHEN l.sku = 'storage_gb_month' THEN 'Checkpoint storage' "
        "  ELSE replace(replace(l.sku, '_1m', ''), '_', ' ') END "
        "FROM whet_cost_lines($3, NULL, $1::bigint, $2::bigint) l JOIN tenants t ON t.id = l.tenant_id "
        "GROUP BY l.tenant_id, t.name, l.sku, l.device_type, l.job_id, l.model, l.day, l.charge "
        "ORDER BY t.name, l.day, 4, 3, l.charge DESC");
    http_route(rt, "GET", "/admin/v1/billing/focus", focus_get, HTTP_ROUTE_ADMIN, "admin_billing_focus");
}
