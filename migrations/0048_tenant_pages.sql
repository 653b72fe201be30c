-- 0048_tenant_pages: GET /admin/v1/tenants is a cursor page like the operator's other lists (gateway/admin.c):
-- tenants in the order they were made, by a keyset on (created_at, id).
CREATE INDEX tenants_created ON tenants(created_at, id);
