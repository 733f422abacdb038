package admin

import (
	_ "embed"
	"net/http"
)

// openAPIPath serves OpenAPI, to every request: it holds no secret, and
// the tools that generate clients and docs from it have no token.
const openAPIPath = "/api/v1/openapi.json"

// OpenAPI is the API's OpenAPI 3.1 document: every endpoint, its
// parameters and bodies, and the schemas of its answers. The tests check
// it against the endpoints the API mounts and every answer against its
// schemas; docs/admin-api.md is rendered from it.
//
//go:embed openapi.json
var OpenAPI []byte

func (a *API) getOpenAPI(w http.ResponseWriter, r *http.Request, _ Access) error {
	writeJSON(w, http.StatusOK, OpenAPI)
	return nil
}
