// Package rest is the gin adapter of the worker's control service: it maps HTTP routes to control.Service
// calls and renders proto messages with protojson, so REST bodies have exactly the proto's JSON shape.
package rest

import (
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
	"github.com/irs-sim/irs/worker/control"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Handler returns the REST API of svc. gin's mode is the caller's to set.
func Handler(svc *control.Service) http.Handler {
	r := gin.New()
	r.Use(gin.Recovery())
	r.GET("/healthz", func(c *gin.Context) { c.String(http.StatusOK, "ok\n") })
	r.GET("/readyz", func(c *gin.Context) {
		if !svc.Ready() {
			c.String(http.StatusServiceUnavailable, "not ready\n")
			return
		}
		c.String(http.StatusOK, "ready\n")
	})
	r.GET("/v1/info", func(c *gin.Context) { render(c, http.StatusOK, svc.Info()) })
	r.GET("/v1/stats", func(c *gin.Context) {
		reset, err := strconv.ParseBool(c.DefaultQuery("reset", "false"))
		if err != nil {
			c.JSON(http.StatusBadRequest, gin.H{"error": "reset: want true or false"})
			return
		}
		render(c, http.StatusOK, svc.Stats(reset))
	})
	return r
}

var marshal = protojson.MarshalOptions{UseProtoNames: true}

func render(c *gin.Context, code int, m proto.Message) {
	b, err := marshal.Marshal(m)
	if err != nil {
		c.JSON(http.StatusInternalServerError, gin.H{"error": err.Error()})
		return
	}
	c.Data(code, "application/json", b)
}
