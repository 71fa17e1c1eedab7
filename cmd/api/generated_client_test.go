package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	openapi_types "github.com/oapi-codegen/runtime/types"

	"github.com/eventq/eventq/internal/apiclient"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// bearer adds a token to every request of a generated client.
func bearer(token string) apiclient.ClientOption {
	return apiclient.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+token)
		return nil
	})
}

// The api driven through a client oapi-codegen generated from docs/openapi.yaml (nothing here
// wrote it): the operator provisions a tenant and a token, the site manages members and
// products and asks for entitlements, and every answer decodes into the document's types.
func TestTheGeneratedClientDrivesTheFrontDoor(t *testing.T) {
	fake := testenv.StartFakePSP(t)
	e := startAPI(t, "ADMIN_API_TOKENS="+adminToken, "PSP_API_BASE="+fake.URL, "PSP_SECRET_KEY=sk_test_x", "APP_URL="+checkoutAppURL)
	ctx := context.Background()
	admin, err := apiclient.NewClientWithResponses(e.Base, bearer(adminToken))
	testenv.Must(t, err)

	account := "acct_generated"
	created, err := admin.CreateTenantWithResponse(ctx, apiclient.TenantCreate{Name: "Generated", PspAccountId: &account,
		AllowedHostnames: &[]string{"shop.example"}})
	testenv.Must(t, err)
	if created.JSON201 == nil {
		t.Fatalf("create tenant: %d %s", created.StatusCode(), created.Body)
	}
	tenant := created.JSON201.Data
	if tenant.Name != "Generated" || tenant.PspAccountId == nil || *tenant.PspAccountId != account || len(tenant.AllowedHostnames) != 1 || tenant.Features.UseQueueEvents {
		t.Fatalf("%+v", tenant)
	}
	dup, err := admin.CreateTenantWithResponse(ctx, apiclient.TenantCreate{Name: "Copy", PspAccountId: &account})
	testenv.Must(t, err)
	if dup.JSON422 == nil || dup.JSON422.Message != "The psp account id has already been taken." {
		t.Fatalf("duplicate account: %d %s", dup.StatusCode(), dup.Body)
	}
	feature, err := admin.SetFeatureWithResponse(ctx, tenant.Id, "UseQueueEvents", apiclient.SetFeatureJSONRequestBody{Active: true})
	testenv.Must(t, err)
	if feature.JSON200 == nil || !feature.JSON200.Data.Active {
		t.Fatalf("feature: %d %s", feature.StatusCode(), feature.Body)
	}
	abilities := []apiclient.TokenInputAbilities{"members:read", "members:write", "products:read", "products:write", "checkout:write"}
	tok, err := admin.CreateTokenWithResponse(ctx, tenant.Id, apiclient.TokenInput{Name: ptr("site"), Abilities: &abilities})
	testenv.Must(t, err)
	if tok.JSON201 == nil {
		t.Fatalf("token: %d %s", tok.StatusCode(), tok.Body)
	}
	tokens, err := admin.ListTokensWithResponse(ctx, tenant.Id)
	testenv.Must(t, err)
	if tokens.JSON200 == nil || len(tokens.JSON200.Data) != 1 || tokens.JSON200.Data[0].Name != "site" {
		t.Fatalf("tokens: %s", tokens.Body)
	}
	list, err := admin.ListTenantsWithResponse(ctx, &apiclient.ListTenantsParams{PerPage: ptr(1)})
	testenv.Must(t, err)
	if list.JSON200 == nil || len(list.JSON200.Data) != 1 || list.JSON200.Meta.PerPage != 1 {
		t.Fatalf("tenants: %s", list.Body)
	}

	site, err := apiclient.NewClientWithResponses(e.Base, bearer(tok.JSON201.Data.Token))
	testenv.Must(t, err)
	var memberIDs []string
	for i := 0; i < 3; i++ {
		m, err := site.CreateMemberWithResponse(ctx, apiclient.MemberCreate{Email: openapi_types.Email(fmt.Sprintf("m%d@example.com", i)), ExternalId: ptr(fmt.Sprintf("user/%d", i))})
		testenv.Must(t, err)
		if m.JSON201 == nil {
			t.Fatalf("member: %d %s", m.StatusCode(), m.Body)
		}
		memberIDs = append(memberIDs, m.JSON201.Data.Id)
	}
	// The generated client refuses an address that is not one (format: email): sent as bytes.
	bad, err := site.CreateMemberWithBodyWithResponse(ctx, "application/json", strings.NewReader(`{"email":"nope"}`))
	testenv.Must(t, err)
	if bad.JSON422 == nil || bad.JSON422.Errors["email"][0] != "The email field must be a valid email address." {
		t.Fatalf("bad member: %d %s", bad.StatusCode(), bad.Body)
	}
	// Pages followed by their cursors visit every member once.
	var seen []string
	params := &apiclient.ListMembersParams{PerPage: ptr(2)}
	for {
		page, err := site.ListMembersWithResponse(ctx, params)
		testenv.Must(t, err)
		if page.JSON200 == nil {
			t.Fatalf("members: %d %s", page.StatusCode(), page.Body)
		}
		for _, m := range page.JSON200.Data {
			seen = append(seen, m.Id)
		}
		if page.JSON200.Meta.NextCursor == nil {
			break
		}
		params.Cursor = page.JSON200.Meta.NextCursor
	}
	if fmt.Sprint(seen) != fmt.Sprint(memberIDs) {
		t.Fatalf("pages visited %v, want %v", seen, memberIDs)
	}
	byExternal, err := site.GetMemberWithResponse(ctx, "external:user/1") // the client encodes it
	testenv.Must(t, err)
	if byExternal.JSON200 == nil || byExternal.JSON200.Data.Id != memberIDs[1] {
		t.Fatalf("by external id: %d %s", byExternal.StatusCode(), byExternal.Body)
	}
	renamed, err := site.UpdateMemberWithResponse(ctx, memberIDs[0], apiclient.MemberInput{Name: ptr("Ada")})
	testenv.Must(t, err)
	if renamed.JSON200 == nil || *renamed.JSON200.Data.Name != "Ada" {
		t.Fatalf("rename: %s", renamed.Body)
	}

	p, err := site.CreateProductWithResponse(ctx, apiclient.ProductCreate{Name: "Course", Amount: 1999, Currency: "usd"})
	testenv.Must(t, err)
	if p.JSON201 == nil || !p.JSON201.Data.Active {
		t.Fatalf("product: %d %s", p.StatusCode(), p.Body)
	}
	product := p.JSON201.Data.Id
	check, err := site.CheckEntitlementWithResponse(ctx, memberIDs[0], product)
	testenv.Must(t, err)
	if check.JSON404 == nil || check.JSON404.Message != "Not Found." {
		t.Fatalf("check before buying: %d %s", check.StatusCode(), check.Body)
	}
	// The member buys it: checkout, paid at the provider, the return page fulfils.
	shop := testenv.Shop{Tenant: testenv.Tenant{Token: tok.JSON201.Data.Token}}
	shop.ID, _ = models.ParseID(tenant.Id)
	shop.Member.ID, _ = models.ParseID(memberIDs[0])
	shop.Product.ID, _ = models.ParseID(product)
	cs := e.MustCheckout(t, shop)
	fake.Pay(cs)
	if res := e.ReturnJSON(t, shop.ID, cs); res.Status != 200 {
		t.Fatalf("return: %d %s", res.Status, res.Body)
	}
	testenv.Eventually(t, 2e9, "the check answers 200", func() bool {
		check, err = site.CheckEntitlementWithResponse(ctx, memberIDs[0], product)
		return err == nil && check.JSON200 != nil
	})
	purchases, err := site.ListMemberPurchasesWithResponse(ctx, memberIDs[0])
	testenv.Must(t, err)
	if purchases.JSON200 == nil || len(purchases.JSON200.Data) != 1 || purchases.JSON200.Data[0].Id != check.JSON200.Data.PurchaseId ||
		purchases.JSON200.Data[0].Status != apiclient.Paid {
		t.Fatalf("purchases: %s", purchases.Body)
	}
	ents, err := site.ListMemberEntitlementsWithResponse(ctx, memberIDs[0])
	testenv.Must(t, err)
	if ents.JSON200 == nil || len(ents.JSON200.Data) != 1 || ents.JSON200.Data[0] != check.JSON200.Data {
		t.Fatalf("entitlements: %s", ents.Body)
	}
	withdrawn, err := site.UpdateProductWithResponse(ctx, product, apiclient.ProductUpdate{Active: ptr(false)})
	testenv.Must(t, err)
	if withdrawn.JSON200 == nil || withdrawn.JSON200.Data.Active {
		t.Fatalf("withdraw: %s", withdrawn.Body)
	}
	onSale, err := site.ListProductsWithResponse(ctx, &apiclient.ListProductsParams{Active: ptr(true)})
	testenv.Must(t, err)
	if onSale.JSON200 == nil || len(onSale.JSON200.Data) != 0 {
		t.Fatalf("on sale: %s", onSale.Body)
	}

	revoke, err := admin.RevokeTokenWithResponse(ctx, tok.JSON201.Data.Id)
	testenv.Must(t, err)
	if revoke.StatusCode() != 204 {
		t.Fatalf("revoke: %d %s", revoke.StatusCode(), revoke.Body)
	}
	rotated, err := admin.RotateSiteKeyWithResponse(ctx, tenant.Id)
	testenv.Must(t, err)
	if rotated.JSON200 == nil || rotated.JSON200.Data.SiteKey == tenant.SiteKey {
		t.Fatalf("rotate: %s", rotated.Body)
	}
}

func ptr[T any](v T) *T { return &v }
