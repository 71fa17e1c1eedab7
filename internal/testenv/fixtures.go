package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/auth"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/models"
)

// Tenant is a tenant created for a test, with an API token.
type Tenant struct {
	models.Tenant
	Token string // "<id>|<secret>"
}

// Shop is a tenant that sells: a member and a 19.99 USD product, on a connected account.
type Shop struct {
	Tenant
	Account string // the connected account; "" for the platform
	Member  models.AudienceMember
	Product models.Product
}

// Must fails t when err is not nil.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// MustTenant creates a tenant with a unique site key and a token carrying abilities (default
// "*"), and sets its UseQueueEvents flag to queued.
func MustTenant(t testing.TB, db *gorm.DB, queued bool, abilities ...string) Tenant {
	t.Helper()
	ctx := context.Background()
	tn := models.Tenant{Name: "Shop", SiteKey: "site_test_" + randomHex(t, 8)}
	if err := db.Create(&tn).Error; err != nil {
		t.Fatalf("create tenant: %v", err)
	}
	_, token, err := auth.CreateToken(ctx, db, tn.ID, "test", abilities, nil)
	if err != nil {
		t.Fatalf("create token: %v", err)
	}
	if err := features.New(db, clock.Real{}).Set(ctx, features.UseQueueEvents, tn.ID, queued); err != nil {
		t.Fatalf("set UseQueueEvents: %v", err)
	}
	return Tenant{Tenant: tn, Token: token}
}

// MustShop creates a tenant as MustTenant does, on account ("" for the platform), with a
// member and a 19.99 USD product.
func MustShop(t testing.TB, db *gorm.DB, account string, queued bool, abilities ...string) Shop {
	t.Helper()
	s := Shop{Tenant: MustTenant(t, db, queued, abilities...), Account: account}
	if account != "" {
		Must(t, db.Model(&models.Tenant{}).Where("id = ?", s.ID).Update("psp_account_id", account).Error)
		s.PSPAccountID = &account
	}
	s.Member = models.AudienceMember{TenantID: s.ID, Email: fmt.Sprintf("member%d@example.com", s.ID), Name: "Ada"}
	Must(t, db.Create(&s.Member).Error)
	s.Product = models.Product{TenantID: s.ID, Name: "Course", Amount: 1999, Currency: "usd"}
	Must(t, db.Create(&s.Product).Error)
	return s
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
