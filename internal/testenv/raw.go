package testenv

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// SendRaw writes req, the bytes of one HTTP/1.1 request (with headers Go's client would refuse
// to send), to the server at base (http://host:port) and returns the answer's status.
func SendRaw(base string, req []byte) (int, error) {
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write(req); err != nil {
		return 0, err
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, nil
}
